"""
OpenAI-compatible chat completions: OpenAI itself, Azure OpenAI, vLLM, llama.cpp's server, Ollama's ``/v1``,
and the hosted compatible APIs (Groq, Mistral, DeepSeek, Gemini, OpenRouter, Cerebras, Hugging Face, ...).

The engine's transcript already is this wire format, so the request carries
it nearly unchanged and the reply's ``choices[0].message`` is handed back
with little more than its fields checked: repairing a broken tool call is the
engine's job, not the adapter's. What the adapter does do, because real
servers need it:

* reads ``finish_reason`` (``length``, ``content_filter``) and a ``refusal``
  into :attr:`ModelReply.finish`, keeping the refusal's text;
* keeps the reasoning a server returns beside the text (``reasoning_content``
  from DeepSeek and vLLM, ``reasoning``/``reasoning_details`` from
  OpenRouter, Gemini's ``extra_content`` thought signatures on calls) and
  sends it back on the next turn, as those servers require;
* reads a call without ``arguments`` (how some hosts send a call to a tool
  without parameters) as ``"{}"``;
* sends a call whose arguments never parsed back as ``"{}"``: servers such as
  llama.cpp refuse the whole request otherwise (the tool message already says
  what was wrong), while the transcript keeps what the model wrote;
* reads Groq's HTTP 400 ``tool_use_failed`` (the model wrote a call the server
  could not parse) as that call, so the engine answers it ``invalid`` and the
  model can correct itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm.engine import ModelReply, has_parts
from agent_fsm.providers._adapter import (
    HttpModel,
    cache_key,
    check_cache,
    check_parts,
    check_tool_names,
    data_url,
    media_after_results,
    model_of,
    object_of,
    output_name,
    prompt_tokens,
    usage_count,
    wire_tool_name,
)
from agent_fsm.providers._http import ProviderConfigError
from agent_fsm.providers._openai_stream import OpenAIStream

__all__ = ["AzureOpenAIChat", "OpenAIChat"]

# Fields of an assistant message sent back, beside role, content and tool_calls.
_ASSISTANT_EXTRAS = ("name", "refusal", "reasoning_content", "reasoning", "reasoning_details", "extra_content")
# Fields of each message role the API takes; anything else (another provider's parts) stays home.
_ROLE_FIELDS = {
    "system": ("role", "content", "name"),
    "developer": ("role", "content", "name"),
    "user": ("role", "content", "name"),
    "tool": ("role", "content", "tool_call_id"),
}
_FINISH = {"stop": "stop", "tool_calls": "tool_calls", "function_call": "tool_calls", "length": "length",
           "content_filter": "content_filter"}  # fmt: skip
_SYSTEM_ROLES = ("system", "developer", "user")


def wire_arguments(arguments: Any) -> str:
    """Arguments as a JSON object string every server parses; unparsable text becomes ``"{}"``."""
    if isinstance(arguments, Mapping):
        return json.dumps(dict(arguments))
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return "{}"
        return arguments if isinstance(parsed, dict) and arguments.strip() else "{}"
    return "{}"


def _wire_call(call: Any) -> dict[str, Any]:
    call = object_of(call) or {}
    function = object_of(call.get("function")) or {}
    out: dict[str, Any] = {
        "id": str(call.get("id", "")),
        "type": "function",
        "function": {
            "name": wire_tool_name(function.get("name")),
            "arguments": wire_arguments(function.get("arguments")),
        },
    }
    if "extra_content" in call:  # Gemini's thought signature rides on the call it belongs to
        out["extra_content"] = call["extra_content"]
    return out


def _chat_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A content part in the Chat Completions form: ``text``, ``image_url``, or ``file`` (a PDF given as bytes)."""
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part["text"]}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": data_url(part)}}
    return {"type": "file", "file": {"filename": part.get("name", "document.pdf"), "file_data": data_url(part)}}


def _wire_message(message: Mapping[str, Any], system_role: str) -> dict[str, Any]:
    role = message.get("role")
    if has_parts(message):  # only a user message (check_parts): system and tool messages take text
        return {"role": "user", "content": [_chat_part(p) for p in message["content"]]}
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            out["tool_calls"] = [_wire_call(call) for call in calls]
        for key in _ASSISTANT_EXTRAS:
            if message.get(key) is not None:
                out[key] = message[key]
        return out
    fields = _ROLE_FIELDS.get(role) if isinstance(role, str) else None
    out = {k: message[k] for k in fields if k in message} if fields else dict(message)
    if role in ("system", "developer"):
        out["role"] = system_role
    return out


def _read_call(call: Any) -> Any:
    """A reply's call in the engine's shape: ``arguments`` missing or ``null`` is ``"{}"``, an object is serialized."""
    if not isinstance(call, dict):
        return call  # malformed: the engine turns it into an invalid observation
    function = object_of(call.get("function"))
    if function is None:
        return call
    arguments = function.get("arguments")
    if arguments is None:
        function = {**function, "arguments": "{}"}
    elif isinstance(arguments, dict):
        function = {**function, "arguments": json.dumps(arguments)}
    return {**call, "function": function}


def _failed_generation(error: Mapping[str, Any]) -> tuple[str, str]:
    """The tool name and argument text of a Groq ``failed_generation`` (as much as can be read)."""
    text = error.get("failed_generation")
    text = text if isinstance(text, str) else ""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict) and isinstance(data.get("name"), str):
        arguments = data.get("arguments", data.get("parameters"))
        return data["name"], arguments if isinstance(arguments, str) else json.dumps(arguments)
    return "", text


class OpenAIChat(HttpModel):
    """
    A model behind ``POST {base_url}/chat/completions``.

    ``base_url`` includes the API version, as OpenAI's own clients expect:
    ``https://api.openai.com/v1`` (the default), ``http://127.0.0.1:8000/v1``
    for vLLM, ``http://127.0.0.1:8080/v1`` for llama.cpp,
    ``http://127.0.0.1:11434/v1`` for Ollama; a query string in it is kept.
    Environment: ``OPENAI_BASE_URL``, ``OPENAI_MODEL``, ``OPENAI_API_KEY``
    (sent as a bearer token when set). ``stream=True`` reads the reply as
    server-sent chunks, assembled into the same message. ``system_role="developer"`` sends the
    system prompt in the ``developer`` role (OpenAI's reasoning models),
    ``"user"`` as a user message (models that accept neither, like o1-mini).
    ``cache=True`` sets ``prompt_cache_key`` (OpenAI's) to one key per agent, its
    model, system prompt and tools; a string is used as the key itself.
    See :class:`HttpModel` for the transport and sampling options.
    """

    provider = "openai"
    base_url_env = "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"
    model_env = "OPENAI_MODEL"
    api_key_env = "OPENAI_API_KEY"
    path = "/chat/completions"

    def __init__(self, *, system_role: str = "system", cache: bool | str = False, **options: Any) -> None:
        if system_role not in _SYSTEM_ROLES:
            raise ProviderConfigError(f"system_role must be one of {', '.join(_SYSTEM_ROLES)}, got {system_role!r}")
        self.cache = check_cache(cache)
        super().__init__(**options)
        self.system_role = system_role

    def request_body(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], output: Any = None
    ) -> dict[str, Any]:
        """
        The transcript in the API's fields, plus the declarations (omitted when empty: some servers reject ``[]``).

        Typed ``output`` whose schema is an object is asked for as ``response_format``
        ``{"type": "json_schema", ...}``, ``strict`` when the schema meets the strict rules.

        Raises:
            ProviderFailure: ``invalid_request`` when a declared tool's name is one the API refuses,
                or an image or file stands where Chat Completions cannot take it (a PDF by URL).
        """
        check_tool_names(self, tools)
        messages = media_after_results(messages)  # a tool message takes text: its images and files follow it
        check_parts(self, messages, "Chat Completions", by_url=("image",))
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_wire_message(m, self.system_role) for m in messages],
        }
        if tools:
            body["tools"] = [dict(t) for t in tools]
            if self.tool_choice is not None:
                body["tool_choice"] = (
                    self.tool_choice
                    if self.tool_choice in ("auto", "none", "required")
                    else {"type": "function", "function": {"name": self.tool_choice}}
                )
            if self.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = self.parallel_tool_calls
        if self.seed is not None:
            body["seed"] = self.seed
        if output is not None and output.schema.get("type") == "object":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": output_name(output), "schema": output.schema, "strict": output.strict},
            }
        if self.cache:
            system = [m.get("content") for m in messages if m.get("role") in ("system", "developer")]
            body["prompt_cache_key"] = cache_key(self.cache, self.model, system, body.get("tools"))
        return self._with_options(body)

    def stream_fields(self) -> dict[str, Any]:
        """``stream`` and ``stream_options.include_usage``, so the last chunk reports the prompt's tokens."""
        return {"stream": True, "stream_options": {"include_usage": True}}

    def stream_assembler(self) -> OpenAIStream:
        """A ``chat.completion.chunk`` assembler that reads a mid-stream ``tool_use_failed`` as this adapter does."""
        return OpenAIStream(self._reads_as_reply)

    def _reads_as_reply(self, status: int, data: Any) -> bool:
        """Groq's 400 ``tool_use_failed``: the model's unparsable call, to be answered ``invalid``."""
        error = object_of(object_of(data) and data.get("error"))
        return status == 400 and error is not None and error.get("code") == "tool_use_failed"

    def read_reply(self, data: Any, status: int = 200, *, turn: int = 0) -> ModelReply:
        """``choices[0].message`` (with its reasoning), ``finish_reason`` and ``usage.prompt_tokens``."""
        reply = object_of(data)
        if reply is None:
            raise self._bad(f"expected a JSON object with 'choices', got {type(data).__name__}", status)
        if status >= 400:
            return self._failed_call(reply, turn)
        choices = reply.get("choices")
        if not isinstance(choices, list) or not choices:
            raise self._bad(f"the reply has no choices (keys: {sorted(reply)})", status)
        choice = object_of(choices[0]) or {}
        message = object_of(choice.get("message"))
        if message is None:
            raise self._bad("choices[0] carries no message object", status)
        reason = choice.get("finish_reason")
        finish = _FINISH.get(reason) if isinstance(reason, str) else None
        out: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        calls = message.get("tool_calls")
        if calls:
            out["tool_calls"] = [_read_call(c) for c in calls] if isinstance(calls, list) else calls
        for key in _ASSISTANT_EXTRAS:
            if message.get(key) is not None:
                out[key] = message[key]
        refusal = message.get("refusal")
        if isinstance(refusal, str) and refusal:
            finish = "refusal"
        if out["content"] is None and not calls and finish not in ("refusal", "content_filter", "length"):
            raise self._bad(f"the message has neither content nor tool_calls (finish_reason={reason!r})", status)
        usage = object_of(reply.get("usage")) or {}
        cached = (object_of(usage.get("prompt_tokens_details")) or {}).get("cached_tokens")
        return ModelReply(
            out,
            prompt_tokens=prompt_tokens(usage.get("prompt_tokens")),
            finish=finish,
            output_tokens=usage_count(usage.get("completion_tokens")),
            cached_tokens=usage_count(cached),
            model=model_of(reply),
        )

    def _failed_call(self, reply: Mapping[str, Any], turn: int) -> ModelReply:
        """A ``tool_use_failed`` error as the call the model tried to make, arguments as it wrote them."""
        error = object_of(reply.get("error")) or {}
        name, arguments = _failed_generation(error)
        call = {"id": f"call_failed_{turn}", "type": "function", "function": {"name": name, "arguments": arguments}}
        return ModelReply({"role": "assistant", "content": None, "tool_calls": [call]}, finish="tool_calls")

    def _reply_to(self, messages: Sequence[Mapping[str, Any]], data: Any, status: int) -> ModelReply:
        """Name a failed call by the assistant messages before it, so replays give the same id."""
        return self.read_reply(data, status, turn=sum(1 for m in messages if m.get("role") == "assistant"))


class AzureOpenAIChat(OpenAIChat):
    """
    An Azure OpenAI deployment: ``POST {endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...``.

    ``base_url`` is the resource endpoint (``https://<resource>.openai.azure.com``)
    or a full deployment URL; ``model`` is the deployment's name; the key is
    sent in the ``api-key`` header. Environment: ``AZURE_OPENAI_ENDPOINT``,
    ``AZURE_OPENAI_DEPLOYMENT``, ``AZURE_OPENAI_API_KEY``, and
    ``OPENAI_API_VERSION`` for ``api_version`` (the official SDK's names).
    A base URL that already carries ``?api-version=`` keeps it.
    """

    provider = "azure"
    base_url_env = "AZURE_OPENAI_ENDPOINT"
    default_base_url = ""
    model_env = "AZURE_OPENAI_DEPLOYMENT"
    api_key_env = "AZURE_OPENAI_API_KEY"
    path = "/chat/completions"

    def __init__(self, *, api_version: str | None = None, **options: Any) -> None:
        version = api_version if api_version is not None else os.environ.get("OPENAI_API_VERSION")
        self._api_version = version
        self._model_option = options.get("model")
        super().__init__(**options)

    def _normalise_base_url(self, url: str) -> str:  # type: ignore[override]
        from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

        if not url:
            raise ProviderConfigError("AzureOpenAIChat needs base_url=... or AZURE_OPENAI_ENDPOINT")
        parts = urlsplit(url.strip())
        path = parts.path.rstrip("/")
        query = dict(parse_qsl(parts.query))
        if "/openai/" not in path + "/":
            deployment = self._deployment()
            path = f"{path}/openai/deployments/{deployment}"
        if "api-version" not in query and "/openai/v1" not in path:
            if not self._api_version:
                raise ProviderConfigError(
                    "AzureOpenAIChat needs an api version: pass api_version=... or set OPENAI_API_VERSION"
                )
            query["api-version"] = self._api_version
        return urlunsplit((parts.scheme, parts.netloc, path, urlencode(query), ""))

    def _deployment(self) -> str:
        name = self._model_option or os.environ.get(self.model_env)
        if not name:
            raise ProviderConfigError(
                f"AzureOpenAIChat needs a deployment name: pass model=... or set {self.model_env}"
            )
        return name

    def headers(self) -> dict[str, str]:
        """``api-key`` (when a key is set), as Azure expects instead of a bearer token."""
        key = self._http.api_key
        return {"api-key": key} if key else {}
