"""
What every HTTP model adapter shares: settings from arguments or the environment, ``chat`` and ``achat``.

An adapter is two pure translations around one exchange: ``request_body``
turns the engine's OpenAI-wire transcript into the provider's request, and
``read_reply`` turns the provider's JSON back into an OpenAI-wire assistant
message. Both can be called (and tested) without any network. With
``stream=True`` the reply arrives as a stream that an assembler turns back
into the body the provider would have sent whole, so ``read_reply`` (and
everything after it) is the same for both.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Self

import httpx

from agent_fsm.engine import (
    ModelReply,
    ProviderFailure,
    RateLimit,
    TokenEstimator,
    assistant_text,
    has_parts,
    media_estimator,
    placeholder,
)
from agent_fsm.providers._exchange import apost, post
from agent_fsm.providers._http import (
    HttpSettings,
    ProviderConfigError,
    check_base_url,
    display_url,
)
from agent_fsm.providers._sse import StreamAssembler

TextListener = Callable[[str], object]
"""``on_delta``: called with each text fragment of a streamed reply (awaited by ``achat`` when it returns one)."""

__all__ = ["HttpModel"]


class HttpModel:
    """
    Base of the adapters: resolves settings, holds the HTTP clients, implements ``chat`` and ``achat``.

    Arguments win over environment variables; the API key is never shown
    (not in ``repr``, not in any error message).

    Args:
        base_url: the server's base URL (else the provider's environment variable, else its default).
        model: the model name (else the provider's model environment variable); required.
        api_key: the secret (else the provider's key environment variable); optional for local servers.
        temperature: sampling temperature, sent only when given.
        extra_body: extra top-level fields merged into every request body.
        connect_timeout: seconds to establish a connection.
        read_timeout: seconds to wait for each read of the reply (and for each write).
        total_timeout: seconds the whole reply may take, however the server paces its bytes; ``None`` for no bound.
        tool_choice: ``"auto"``, ``"none"``, ``"required"`` (some call must be made) or a tool's name
            (that tool must be called); sent only with tools, in each provider's own form.
        parallel_tool_calls: ``False`` asks for at most one call per reply; ``None`` leaves the provider's default.
        seed: a sampling seed, for providers that take one.
        max_retries: retries after the first attempt, for transient failures only.
        retry_unknown_outcome: also retry read timeouts and dropped connections, whose request may have been served.
        backoff: first wait between retries when the server gives no ``Retry-After``; doubles each retry.
        max_retry_wait: the longest wait honoured; a longer ``Retry-After`` ends the call instead.
        max_requests: HTTP requests this adapter may ever send (retries included); ``None`` for no limit.
        max_response_bytes: a larger reply body is refused as ``bad_response``.
        stream: ask for a streamed reply and report its text as it arrives (``on_delta``); the reply
            returned is the same as without streaming.
        native_output: when a run has typed output (``output=``), ask the provider for it natively
            (OpenAI's ``response_format`` JSON schema, Anthropic's forced final tool, Ollama's
            ``format``); ``False`` leaves the engine to parse the answer text as told in the system prompt.
        transport: an httpx transport (e.g. ``httpx.MockTransport``) for the client the adapter creates.
        client: an ``httpx.Client`` to use instead (the caller closes it).
        async_transport: an httpx async transport for the ``httpx.AsyncClient`` that ``achat`` creates.
        async_client: an ``httpx.AsyncClient`` for ``achat`` to use instead (the caller closes it).
        sleep: how to wait between retries (``time.sleep``; under ``achat`` the default waits with
            ``asyncio.sleep``, and a given function's result is awaited when it is awaitable).
        rate_limit: a :class:`~agent_fsm.RateLimit` (requests and tokens per minute) every run using this
            adapter waits on before each model call; pass one instance to every adapter sharing a provider limit.
    """

    provider: ClassVar[str]
    base_url_env: ClassVar[str]
    default_base_url: ClassVar[str]
    model_env: ClassVar[str]
    api_key_env: ClassVar[str]
    path: ClassVar[str]
    # The provider's published rule for what an image costs (see agent_fsm.engine.media_estimator).
    image_rule: ClassVar[str] = "openai"

    @property
    def estimator(self) -> TokenEstimator:
        """
        The token estimate with images and files priced by this provider's rule.

        An :class:`agent_fsm.Agent` built without ``estimator=`` measures its
        prompts with it, keeping prompt budgets true to the provider when the
        conversation holds images or PDFs; for text it counts as
        :func:`agent_fsm.estimate_tokens` does.
        """
        return media_estimator(self.image_rule)

    def __init__(
        self,
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        temperature: float | None = None,
        extra_body: Mapping[str, Any] | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 120.0,
        total_timeout: float | None = 600.0,
        tool_choice: str | None = None,
        parallel_tool_calls: bool | None = None,
        seed: int | None = None,
        max_retries: int = 2,
        retry_unknown_outcome: bool = False,
        backoff: float = 0.5,
        max_retry_wait: float = 30.0,
        max_requests: int | None = 100,
        max_response_bytes: int = 8_000_000,
        stream: bool = False,
        native_output: bool = True,
        transport: httpx.BaseTransport | None = None,
        client: httpx.Client | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        async_client: httpx.AsyncClient | None = None,
        sleep: Callable[[float], object] = time.sleep,
        rate_limit: RateLimit | None = None,
    ) -> None:
        source = "base_url" if base_url is not None else self.base_url_env
        url = base_url if base_url is not None else os.environ.get(self.base_url_env) or self.default_base_url
        url = check_base_url(self._normalise_base_url(url), source)
        name = model if model is not None else os.environ.get(self.model_env)
        if not name:
            raise ProviderConfigError(
                f"{type(self).__name__} needs a model name: pass model=... or set {self.model_env}"
            )
        self.model = name
        if tool_choice is not None and (not isinstance(tool_choice, str) or not tool_choice):
            raise ProviderConfigError(
                f"tool_choice must be 'auto', 'none', 'required' or a tool's name, got {tool_choice!r}"
            )
        if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
            raise ProviderConfigError(f"parallel_tool_calls must be True, False or None, got {parallel_tool_calls!r}")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ProviderConfigError(f"seed must be an integer, got {seed!r}")
        if not isinstance(stream, bool):
            raise ProviderConfigError(f"stream must be True or False, got {stream!r}")
        # Read by the run driver: it passes on_delta only to an adapter that streams,
        # and a run's typed output (output=) only to one that takes it natively.
        self.streams = stream
        if not isinstance(native_output, bool):
            raise ProviderConfigError(f"native_output must be True or False, got {native_output!r}")
        self.takes_output = native_output
        self.tool_choice = tool_choice
        self.parallel_tool_calls = parallel_tool_calls
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise ProviderConfigError(f"rate_limit must be a RateLimit or None, got {rate_limit!r}")
        self.rate_limit = rate_limit  # read by the run driver before each model call
        self.seed = seed
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self._http = HttpSettings(
            name=self.provider,
            base_url=url,
            api_key=api_key if api_key is not None else os.environ.get(self.api_key_env),
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            total_timeout=total_timeout,
            max_retries=max_retries,
            retry_unknown_outcome=retry_unknown_outcome,
            backoff=backoff,
            max_retry_wait=max_retry_wait,
            max_requests=max_requests,
            max_response_bytes=max_response_bytes,
            transport=transport,
            client=client,
            sleep=sleep,
            async_transport=async_transport,
            async_client=async_client,
        )

    @staticmethod
    def _normalise_base_url(url: str) -> str:
        return url

    @property
    def base_url(self) -> str:
        """The server's base URL (as configured, trailing slash removed)."""
        return self._http.base_url

    @property
    def requests_made(self) -> int:
        """HTTP requests sent so far, retries included; counted against ``max_requests``."""
        return self._http.requests_made

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={display_url(self.base_url)!r}, model={self.model!r})"

    def close(self) -> None:
        """Release the HTTP connections (only those of a client the adapter created)."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def aclose(self) -> None:
        """Release the HTTP connections of both clients (only those the adapter created)."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- the provider-specific halves ---------------------------------------------

    def headers(self) -> dict[str, str]:
        """Request headers, authentication included."""
        key = self._http.api_key
        return {"authorization": f"Bearer {key}"} if key else {}

    def request_body(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], output: Any = None
    ) -> dict[str, Any]:
        """The provider's request for this transcript and these tool declarations (and typed ``output``, natively)."""
        raise NotImplementedError("an adapter must implement request_body")

    def typed_reply(self, reply: ModelReply, output: Any, tools: Sequence[Mapping[str, Any]] = ()) -> ModelReply:
        """The reply to a request (with ``tools``) that asked for typed ``output`` natively, as an answer reads."""
        return reply

    def read_reply(self, data: Any, status: int = 200) -> ModelReply:
        """
        The OpenAI-wire assistant message in the provider's reply, with its prompt token count.

        Raises:
            ProviderFailure: ``bad_response`` when the reply lacks the provider's shape.
                Malformed tool calls inside a well-shaped reply are passed through.
        """
        raise NotImplementedError("an adapter must implement read_reply")

    def stream_fields(self) -> dict[str, Any]:
        """The request fields that ask this provider for a streamed reply."""
        return {"stream": True}

    def stream_assembler(self) -> StreamAssembler:
        """A fresh assembler for one streamed reply (see ``_sse``)."""
        raise NotImplementedError("an adapter that streams must implement stream_assembler")

    def _with_options(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.streams:
            body.update(self.stream_fields())
        body.update(self.extra_body)
        return body

    # Read by the run driver: it passes Limits.max_output_tokens only to a model that takes it.
    takes_output_cap = True
    output_cap_field = "max_tokens"  # where the request body caps the reply's tokens

    def _capped(self, body: dict[str, Any], cap: int | None) -> dict[str, Any]:
        """``body`` with its output capped at ``cap`` (``None``: as it is); a lower cap already there stands."""
        if cap is not None:
            field = "max_completion_tokens" if "max_completion_tokens" in body else self.output_cap_field
            given = body.get(field)
            body[field] = min(given, cap) if isinstance(given, int) and given > 0 else cap
        return body

    def _bad(self, what: str, status: int) -> Exception:
        return self._http.bad_response(what, status)

    # --- the Model protocol ----------------------------------------------------------

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        on_delta: TextListener | None = None,
        output: Any = None,
        max_output_tokens: int | None = None,
    ) -> ModelReply:
        """
        Send the transcript and the tool declarations; return the assistant's reply.

        ``on_delta`` hears each text fragment of a streamed reply as it arrives
        (only when the adapter streams); the reply returned is the whole one.
        ``output`` (an :class:`agent_fsm.OutputSpec`, given by the engine when
        ``native_output`` is on) asks the provider for an answer of that schema.
        ``max_output_tokens`` caps the reply (the run's ``Limits.max_output_tokens``,
        which its cost budget counts on); a lower cap of the adapter's own stands.

        Raises:
            ProviderFailure: the reply could not be obtained or read (the run ends ``provider_error``).
        """
        status, data = self._post(self._capped(self.request_body(messages, tools, output), max_output_tokens), on_delta)
        reply = self._reply_to(messages, data, status)
        return reply if output is None else self.typed_reply(reply, output, tools)

    async def achat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        on_delta: TextListener | None = None,
        output: Any = None,
        max_output_tokens: int | None = None,
    ) -> ModelReply:
        """
        :meth:`chat` on ``httpx.AsyncClient``: the same request, reply, retries and failures.

        ``on_delta`` may be a plain or an ``async`` function; its result is awaited when awaitable.

        Raises:
            ProviderFailure: the reply could not be obtained or read (the run ends ``provider_error``).
        """
        body = self._capped(self.request_body(messages, tools, output), max_output_tokens)
        status, data = await self._apost(body, on_delta)
        reply = self._reply_to(messages, data, status)
        return reply if output is None else self.typed_reply(reply, output, tools)

    def _path(self) -> str:
        """Where the request goes, under the base URL (``path``; an adapter whose URL names the model overrides)."""
        return self.path

    def _post(self, body: Mapping[str, Any], on_delta: TextListener | None) -> tuple[int, Any]:
        stream = self.stream_assembler if self.streams else None
        return post(
            self._http, self._path(), body, self.headers(), accept_error=self._reads_as_reply, stream=stream,
            on_delta=on_delta,
        )  # fmt: skip

    async def _apost(self, body: Mapping[str, Any], on_delta: TextListener | None) -> tuple[int, Any]:
        stream = self.stream_assembler if self.streams else None
        return await apost(
            self._http, self._path(), body, self.headers(), accept_error=self._reads_as_reply, stream=stream,
            on_delta=on_delta,
        )  # fmt: skip

    def _reads_as_reply(self, status: int, data: Any) -> bool:
        """Whether an error reply carries something the adapter reads as a model reply (none by default)."""
        return False

    def _reply_to(self, messages: Sequence[Mapping[str, Any]], data: Any, status: int) -> ModelReply:
        """Read the reply; an adapter that needs the transcript to do so (for ids) overrides this."""
        return self.read_reply(data, status)


TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""The tool names OpenAI, Anthropic and most compatible servers accept."""


def check_tool_names(adapter: HttpModel, tools: Sequence[Mapping[str, Any]]) -> None:
    """
    Refuse, before anything is sent, declarations whose names the providers reject.

    Raises:
        ProviderFailure: ``invalid_request``, naming every bad tool name.
    """
    bad = []
    for tool in tools:
        function = object_of(tool.get("function")) or {}
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            bad.append(repr(name))
    if bad:
        raise adapter._http.failure(
            f"tool names must match ^[a-zA-Z0-9_-]{{1,64}}$ for this provider; not sent: {', '.join(bad)}",
            kind="invalid_request",
        )


def refuse_part(adapter: HttpModel, part: Mapping[str, Any], where: str) -> ProviderFailure:
    """
    The typed refusal of an image or file the provider cannot take ``where`` it stands; nothing is sent.

    The message names the part by its placeholder (type and size), never its bytes.
    """
    return adapter._http.failure(f"{placeholder(part)} cannot be sent {where}; not sent", kind="invalid_request")


def check_parts(
    adapter: HttpModel,
    messages: Sequence[Mapping[str, Any]],
    api: str,
    *,
    roles: tuple[str, ...] = ("user",),
    kinds: tuple[str, ...] = ("image", "file"),
    by_url: tuple[str, ...] = ("image", "file"),
) -> None:
    """
    Refuse, before anything is sent, each image or file ``api`` cannot take where it stands.

    ``roles``: the messages that may carry one; ``kinds``: the parts it reads at
    all; ``by_url``: the kinds it takes by address (the others only as bytes).

    Raises:
        ProviderFailure: ``invalid_request``, naming the part by type and size.
    """
    for message in messages:
        if not has_parts(message):
            continue
        role = message.get("role")
        for part in message["content"]:
            kind = part.get("type")
            if kind == "text":
                continue
            if kind not in kinds:
                raise refuse_part(adapter, part, f"to {api}, which reads no {kind}")
            if role not in roles:
                raise refuse_part(adapter, part, f"in a {role} message to {api}")
            if "url" in part and kind not in by_url:
                raise refuse_part(adapter, part, f"by URL to {api}, which takes a {kind} only as bytes")


def result_text(content: Any) -> Any:
    """A tool message's content with images and files left out: its text parts joined (other content as is)."""
    if type(content) is not list:
        return content
    return "".join(p["text"] for p in content if isinstance(p, Mapping) and p.get("type") == "text")


def result_media(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The images and files a tool message carries (none for text)."""
    return [p for p in message["content"] if p.get("type") != "text"] if has_parts(message) else []


def media_after_results(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """
    The transcript for an API whose tool results take text only: each result's images and files follow it.

    A tool message keeps its text; after the turn's last tool message, one user
    message carries each result's media, introduced by the call it came from
    (a user message between two tool messages would break the turn apart).
    """
    out: list[Mapping[str, Any]] = []
    held: list[dict[str, Any]] = []
    names: dict[Any, Any] = {}  # call id -> tool name, so the model is told which of its calls it sees
    for message in messages:
        for call in message.get("tool_calls") or () if message.get("role") == "assistant" else ():
            if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
                names[call.get("id")] = call["function"].get("name")
        if message.get("role") == "tool":
            media = result_media(message)
            if media:
                out.append({**message, "content": result_text(message["content"])})
                ident = message.get("tool_call_id")
                said = f"The result of {names.get(ident, 'the tool')} (call {ident}) shows:"
                held += [{"type": "text", "text": said}, *media]
                continue
        elif held:
            out.append({"role": "user", "content": held})
            held = []
        out.append(message)
    if held:
        out.append({"role": "user", "content": held})
    return out


def data_url(part: Mapping[str, Any]) -> str:
    """A part given as bytes written as a ``data:`` URL; a part given as a URL, that URL."""
    if "url" in part:
        return str(part["url"])
    return f"data:{part['media_type']};base64,{part['data']}"


def wire_tool_name(name: Any) -> str:
    """A proposed call's name as the provider accepts it back (bad characters become ``_``; at most 64)."""
    text = name if isinstance(name, str) else ""
    if TOOL_NAME.match(text):
        return text
    return (re.sub(r"[^a-zA-Z0-9_-]", "_", text) or "_")[:64]


def object_of(data: Any) -> dict[str, Any] | None:
    """``data`` when it is a JSON object, else ``None``."""
    return data if isinstance(data, dict) else None


def arguments_object(arguments: Any) -> dict[str, Any]:
    """
    A call's arguments as the object Anthropic (``input``) and Ollama (``arguments``) require.

    Arguments that never parsed to an object (the engine answered them with an
    ``invalid`` observation quoting the text) are sent as ``{}``: the format
    has no place for broken JSON, and the tool result already says what was wrong.
    """
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def prompt_tokens(value: Any) -> int | None:
    """A reported prompt token count, or ``None`` when it is missing, not a count, or zero (no prompt is empty)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def output_name(output: Any) -> str:
    """The wire name of typed ``output``: its schema's name when the APIs accept it, else ``final_result``."""
    return output.name if TOOL_NAME.match(output.name) else "final_result"


def usage_count(value: Any) -> int | None:
    """A reported usage figure (tokens out, tokens from a cache), or ``None`` when missing or not a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def model_of(reply: Mapping[str, Any]) -> str | None:
    """The model the provider says answered (it prices the call), or ``None``."""
    name = reply.get("model")
    return name if isinstance(name, str) and name else None


def cached_tokens(value: Any) -> int:
    """A reported count of cached prompt tokens (0 when missing or not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def check_cache(cache: Any) -> bool | str:
    """
    The ``cache`` option as given: ``True``, ``False`` or a key of the caller's.

    Raises:
        ProviderConfigError: anything else (an empty key included).
    """
    if not isinstance(cache, (bool, str)) or cache == "":
        raise ProviderConfigError(f"cache must be True, False or a non-empty key, got {cache!r}")
    return cache


def cache_key(cache: bool | str, model: str, system: Any, tools: Any) -> str:
    """
    OpenAI's ``prompt_cache_key``: the caller's key, else one shared by every run of one agent.

    Runs of one agent (its model, system prompt and tools) open with the same
    prefix; sending them under one key routes them to the same cache, which is
    what makes OpenAI's automatic caching hit across runs.
    """
    if isinstance(cache, str):
        return cache
    text = json.dumps([model, system, tools], sort_keys=True, separators=(",", ":"), default=str)
    return "agent_fsm-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def kept_parts(message: Mapping[str, Any], key: str) -> list[dict[str, Any]] | None:
    """
    The provider's own parts an assistant message keeps under ``key`` (to be sent back as they came), or ``None``.

    A reply with signed reasoning (Anthropic's thinking blocks, Gemini's thought
    signatures, OpenAI's encrypted reasoning items) keeps its parts whole,
    because the provider refuses them changed or missing on the next turn.
    """
    kept = message.get(key)
    if isinstance(kept, list) and kept:
        return [dict(part) for part in kept if isinstance(part, Mapping)]
    return None


def merge_turn(turns: list[dict[str, Any]], role: str, field: str, parts: list[dict[str, Any]]) -> None:
    """Append ``parts`` as a turn of ``role``, joined to the last turn when it has that role (roles must alternate)."""
    if not parts:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1][field].extend(parts)
    else:
        turns.append({"role": role, field: parts})


SYSTEM_ROLES = ("system", "developer")
"""The roles whose text an API that takes the system prompt apart (Responses, Gemini) gets as one text."""


def system_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The transcript's system (and developer) messages as one text, blank-line separated; ``None`` when none."""
    texts = [assistant_text(m) for m in messages if m.get("role") in SYSTEM_ROLES]
    return "\n\n".join(t for t in texts if t) or None
