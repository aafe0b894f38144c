"""
Anthropic's Messages API, translated to and from the engine's OpenAI-wire transcript.

The two formats carry the same facts in different places: the system prompt
is a top-level field; a proposal is a ``tool_use`` content block whose
``input`` is an object (not a JSON string); a tool result is a ``tool_result``
block inside a *user* message, and the results of one turn's calls travel
together in one message. Call ids pass through unchanged both ways, so every
result stays correlated with its call.

A reply with blocks beyond text and ``tool_use`` (``thinking`` and
``redacted_thinking`` with their signatures, server tools and their results,
cited text) keeps the reply's whole ``content`` in the assistant message's
``anthropic_content`` field, and that list is sent back exactly as it came:
the API refuses a thinking turn whose signed blocks are missing or changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm.engine import ModelReply, assistant_text, has_parts
from agent_fsm.providers._adapter import (
    HttpModel,
    TextListener,
    arguments_object,
    cached_tokens,
    check_cache,
    check_parts,
    check_tool_names,
    kept_parts,
    merge_turn,
    model_of,
    object_of,
    prompt_tokens,
    usage_count,
    wire_tool_name,
)
from agent_fsm.providers._anthropic_stream import AnthropicStream
from agent_fsm.providers._http import ProviderConfigError

__all__ = ["AnthropicMessages", "from_anthropic_message", "to_anthropic_messages"]

ANTHROPIC_VERSION = "2023-06-01"

FINAL_TOOL = "final_result"
"""The name of the final answer's tool (typed output)."""

FINAL_TOOL_DESCRIPTION = "The final response which ends this conversation"
"""How the final answer's tool (typed output) is described to the model."""

CONTENT_KEY = "anthropic_content"
"""The assistant message field that keeps a reply's blocks to be sent back verbatim."""

_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
           "model_context_window_exceeded": "length", "refusal": "refusal"}  # fmt: skip
_PLAIN_BLOCKS = frozenset({"text", "tool_use"})


def _is_error(content: Any) -> bool:
    """Whether a tool message reports a failure (the engine's ``{"ok": false, ...}`` payload)."""
    if not isinstance(content, str):
        return False
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("ok") is False


def _media_block(part: Mapping[str, Any]) -> dict[str, Any]:
    """An image or file part as an ``image`` or ``document`` block, its source a URL or base64."""
    if "url" in part:
        source = {"type": "url", "url": part["url"]}
    else:
        source = {"type": "base64", "media_type": part["media_type"], "data": part["data"]}
    return {"type": "image" if part["type"] == "image" else "document", "source": source}


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, list):  # content parts: text, and images and files as their blocks
        return [
            _media_block(p) if p.get("type") in ("image", "file") else {"type": "text", "text": p["text"]}
            for p in content
            if isinstance(p, Mapping) and (p.get("text") or p.get("type") in ("image", "file"))
        ]
    text = str(content)
    return [{"type": "text", "text": text}] if text else []


def _assistant_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    kept = kept_parts(message, CONTENT_KEY)
    if kept is not None:
        return kept
    blocks = _text_blocks(message.get("content"))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        call = object_of(call) or {}
        function = object_of(call.get("function")) or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id", "")),
                "name": wire_tool_name(function.get("name")),
                "input": arguments_object(function.get("arguments")),
            }
        )
    return blocks


def to_anthropic_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """
    Split an OpenAI-wire transcript into Anthropic's ``system`` text and ``messages``.

    Consecutive messages that land on the same role (a turn's tool results,
    or tool results followed by a user message) are merged into one message,
    as the API wants roles to alternate. An assistant message with no text
    and no calls is dropped: the API refuses empty content.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            text = assistant_text(message)
            if text:
                system.append(text)
            continue
        if role == "assistant":
            role, blocks = "assistant", _assistant_blocks(message)
        elif role == "tool":
            content = message.get("content")
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id", "")),
                "content": content if isinstance(content, str) else json.dumps(content),
            }
            if has_parts(message):  # a result may show images and documents
                result["content"] = _text_blocks(content)
            if _is_error(content):
                result["is_error"] = True
            role, blocks = "user", [result]
        else:
            role, blocks = "user", _text_blocks(message.get("content"))
        merge_turn(out, role, "content", blocks)
    return ("\n\n".join(system) or None), out


def to_anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function declarations as Anthropic tool definitions (``input_schema``)."""
    converted = []
    for tool in tools:
        function = object_of(tool.get("function")) or {}
        entry = {"name": function.get("name"), "input_schema": function.get("parameters") or {"type": "object"}}
        if function.get("description"):
            entry["description"] = function["description"]
        converted.append(entry)
    return converted


def from_anthropic_message(reply: Mapping[str, Any]) -> dict[str, Any] | None:
    """
    An Anthropic reply's content as an OpenAI-wire assistant message.

    Text blocks are joined into ``content`` (adjacent ones directly, as cited
    pieces of one passage; ones apart, with server-tool blocks between them,
    by a blank line); each ``tool_use`` becomes a ``tool_calls`` entry with the
    same id and its ``input`` serialized to the JSON string the wire carries.
    When other blocks are present (thinking, server tools, citations), the
    whole list is kept in ``anthropic_content`` to be sent back as it came.
    Returns ``None`` when ``content`` is not a list of blocks.
    """
    content = reply.get("content")
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    apart = False  # a non-text block came since the last text
    verbatim = False
    for block in content:
        block = object_of(block) or {}
        kind = block.get("type")
        if kind not in _PLAIN_BLOCKS or block.get("citations"):
            verbatim = True
        if kind == "text" and isinstance(block.get("text"), str):
            if apart and texts:
                texts.append("\n\n")
            texts.append(block["text"])
            apart = False
            continue
        apart = True
        if kind == "tool_use":
            arguments = block.get("input")
            text = json.dumps(arguments) if isinstance(arguments, dict) else arguments
            calls.append(
                {"id": block.get("id"), "type": "function", "function": {"name": block.get("name"), "arguments": text}}
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    if verbatim:
        message[CONTENT_KEY] = [dict(b) for b in content if isinstance(b, Mapping)]
    return message


MAX_BREAKPOINTS = 4
"""Anthropic's limit on ``cache_control`` breakpoints in one request."""

_EPHEMERAL = {"type": "ephemeral"}


def place_breakpoints(body: dict[str, Any]) -> int:
    """
    Mark ``body``'s stable prefix with ``cache_control`` breakpoints; return how many were placed.

    Anthropic caches a request's prefix up to each breakpoint and serves a
    later request that repeats it from the cache. An agent's prompt only
    grows, so the breakpoints go where the next request will repeat it: the
    last tool declaration (tools come first), the system prompt, the last
    block of the newest user turn (the whole conversation so far: the next
    request reads it back) and the one of the user turn before it (what the
    previous request wrote, read back now). That is at most four, Anthropic's
    limit; a block a breakpoint cannot sit on (thinking) is never marked.
    """
    placed = 0
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        tools[-1] = {**tools[-1], "cache_control": dict(_EPHEMERAL)}
        placed += 1
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": dict(_EPHEMERAL)}]
        placed += 1
    turns = [m for m in body.get("messages", []) if m.get("role") == "user" and m.get("content")]
    for message in reversed(turns[-2:]):
        if placed >= MAX_BREAKPOINTS:
            break
        blocks = message["content"]
        blocks[-1] = {**blocks[-1], "cache_control": dict(_EPHEMERAL)}
        placed += 1
    return placed


class _Turn:
    """One assistant turn over its ``pause_turn`` parts: the next request, and the blocks so far."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        self._asked = body["messages"]
        self._earlier: list[Any] = []  # blocks of the paused parts of this turn
        self.status = 200
        self.data: Any = None

    def add(self, status: int, data: Any) -> bool:
        """Take one part's reply; ``True`` when the turn paused and the next request is ready."""
        self.status, self.data = status, data
        reply = object_of(data)
        if reply is None or not isinstance(reply.get("content"), list):
            return False
        content = [*self._earlier, *reply["content"]]
        self.data = {**reply, "content": content}
        if reply.get("stop_reason") != "pause_turn":
            return False
        # Paused mid-turn: send the turn so far back as the assistant's, and the API goes on.
        self._earlier = content
        self.body = {**self.body, "messages": [*self._asked, {"role": "assistant", "content": list(content)}]}
        return True


class AnthropicMessages(HttpModel):
    """
    A model behind Anthropic's ``POST {base_url}/v1/messages``.

    Environment: ``ANTHROPIC_BASE_URL`` (default ``https://api.anthropic.com``),
    ``ANTHROPIC_MODEL``, ``ANTHROPIC_API_KEY`` (sent as ``x-api-key``).
    ``max_tokens`` is required by the API and defaults to 1024.
    A reply that stops with ``pause_turn`` (a server tool's long turn) is
    continued, up to ``max_continuations`` more requests, and the parts are
    returned as one reply. ``seed`` is not offered by the API. With
    ``stream=True`` the reply comes as an event stream, assembled into the same message.
    ``cache=True`` marks the prompt's stable prefix for Anthropic's prompt
    cache (see :func:`place_breakpoints`); cached tokens come back in the
    reply's usage and are priced as such.
    See :class:`HttpModel` for the transport options.
    """

    provider = "anthropic"
    image_rule = "anthropic"
    base_url_env = "ANTHROPIC_BASE_URL"
    default_base_url = "https://api.anthropic.com"
    model_env = "ANTHROPIC_MODEL"
    api_key_env = "ANTHROPIC_API_KEY"
    path = "/v1/messages"

    def __init__(
        self, *, max_tokens: int = 1024, max_continuations: int = 4, cache: bool = False, **options: Any
    ) -> None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ProviderConfigError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if not isinstance(max_continuations, int) or isinstance(max_continuations, bool) or max_continuations < 0:
            raise ProviderConfigError(f"max_continuations must be a non-negative integer, got {max_continuations!r}")
        super().__init__(**options)
        if self.seed is not None:
            raise ProviderConfigError("the Anthropic Messages API takes no seed; leave seed unset")
        self.max_tokens = max_tokens
        self.max_continuations = max_continuations
        if not isinstance(check_cache(cache), bool):
            raise ProviderConfigError(f"cache must be True or False for Anthropic (no key), got {cache!r}")
        self.cache = cache

    def headers(self) -> dict[str, str]:
        """``x-api-key`` (when a key is set) and the API version."""
        key = self._http.api_key
        return {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {})}

    def request_body(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], output: Any = None
    ) -> dict[str, Any]:
        """
        System text apart, the rest as alternating messages, tools with ``input_schema``.

        Typed ``output`` whose schema is an object becomes one more tool, the
        final answer's, and a call is required (``tool_choice`` ``any``, or that
        tool when there is no other): the reply's call of it is the answer
        (see :meth:`typed_reply`). When a tool of the run has that name already,
        the answer is asked for as text instead.
        """
        check_tool_names(self, tools)
        check_parts(self, messages, "Anthropic Messages", roles=("user", "tool"))
        system, converted = to_anthropic_messages(messages)
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": converted}
        if system is not None:
            body["system"] = system
        if tools:
            body["tools"] = to_anthropic_tools(tools)
            choice = self._tool_choice()
            if choice is not None:
                body["tool_choice"] = choice
        name = FINAL_TOOL
        if (
            output is not None
            and output.schema.get("type") == "object"
            and all(t.get("name") != name for t in body.get("tools", ()))
        ):
            final = {"name": name, "description": FINAL_TOOL_DESCRIPTION, "input_schema": output.schema}
            body["tools"] = [*body.get("tools", ()), final]
            choice = {"type": "any"} if tools else {"type": "tool", "name": name}
            if self.parallel_tool_calls is False:
                choice["disable_parallel_tool_use"] = True
            body["tool_choice"] = choice
        if self.cache:
            place_breakpoints(body)
        return self._with_options(body)

    def typed_reply(self, reply: ModelReply, output: Any, tools: Sequence[Mapping[str, Any]] = ()) -> ModelReply:
        """
        A call of the final answer's tool as the answer: its input, as JSON text.

        Called alongside other tools, it is left out and the other calls go
        ahead (the model answers again once it has their results).
        """
        name = FINAL_TOOL
        if any((t.get("function") or {}).get("name") == name for t in tools):
            return reply  # a tool of the run holds the name: the answer was asked for as text
        message = dict(reply.message)
        calls = message.get("tool_calls") or []
        final = [c for c in calls if isinstance(c, Mapping) and c.get("function", {}).get("name") == name]
        if not final:
            return reply
        rest = [c for c in calls if c not in final]
        blocks = message.get(CONTENT_KEY)
        if isinstance(blocks, list):  # sent back as it came, less the final call (it gets no tool_result)
            message[CONTENT_KEY] = [b for b in blocks if not (b.get("type") == "tool_use" and b.get("name") == name)]
        if rest:
            message["tool_calls"] = rest
            return ModelReply(message, prompt_tokens=reply.prompt_tokens, finish=reply.finish)
        text = final[0]["function"].get("arguments")
        message.pop("tool_calls", None)
        message["content"] = text if isinstance(text, str) else json.dumps(text)
        if isinstance(blocks, list):
            message[CONTENT_KEY].append({"type": "text", "text": message["content"]})
        return ModelReply(message, prompt_tokens=reply.prompt_tokens, finish="stop")

    def _tool_choice(self) -> dict[str, Any] | None:
        """``tool_choice`` and ``parallel_tool_calls`` in the API's one ``tool_choice`` object."""
        if self.tool_choice is None and self.parallel_tool_calls is None:
            return None
        kinds = {None: "auto", "auto": "auto", "required": "any", "none": "none"}
        choice: dict[str, Any] = {"type": kinds.get(self.tool_choice, "tool")}
        if choice["type"] == "tool":
            choice["name"] = self.tool_choice
        if self.parallel_tool_calls is False and choice["type"] != "none":
            choice["disable_parallel_tool_use"] = True
        return choice

    def _post(self, body: Mapping[str, Any], on_delta: TextListener | None) -> tuple[int, Any]:
        """One assistant turn: a ``pause_turn`` reply is continued, and its parts come back as one reply."""
        turn = _Turn(body)
        for _ in range(self.max_continuations + 1):
            if not turn.add(*super()._post(turn.body, on_delta)):
                break
        return turn.status, turn.data

    async def _apost(self, body: Mapping[str, Any], on_delta: TextListener | None) -> tuple[int, Any]:
        """:meth:`_post` on ``httpx.AsyncClient``, ``pause_turn`` continuations included."""
        turn = _Turn(body)
        for _ in range(self.max_continuations + 1):
            if not turn.add(*await super()._apost(turn.body, on_delta)):
                break
        return turn.status, turn.data

    def stream_assembler(self) -> AnthropicStream:
        """A Messages event-stream assembler (``message_start`` ... ``message_stop``)."""
        return AnthropicStream()

    def read_reply(self, data: Any, status: int = 200) -> ModelReply:
        """The reply's blocks as one assistant message; the prompt size from ``usage``."""
        reply = object_of(data)
        if reply is None:
            raise self._bad(f"expected a JSON object with 'content', got {type(data).__name__}", status)
        message = from_anthropic_message(reply)
        if message is None:
            raise self._bad(f"the reply has no content blocks (keys: {sorted(reply)})", status)
        reason = reply.get("stop_reason")
        finish = _FINISH.get(reason) if isinstance(reason, str) else None
        if reason == "pause_turn":
            finish = "length"  # still paused after max_continuations: the turn is unfinished
        if message["content"] is None and "tool_calls" not in message and finish not in ("length", "refusal"):
            raise self._bad(f"the reply has neither text nor tool_use blocks (stop_reason={reason!r})", status)
        usage = object_of(reply.get("usage")) or {}
        # Cached prompt parts are reported apart; the prompt's size is the sum.
        counted = (
            cached_tokens(usage.get("input_tokens"))
            + cached_tokens(usage.get("cache_creation_input_tokens"))
            + cached_tokens(usage.get("cache_read_input_tokens"))
        )
        return ModelReply(
            message,
            prompt_tokens=prompt_tokens(counted),
            finish=finish,
            output_tokens=usage_count(usage.get("output_tokens")),
            cached_tokens=usage_count(usage.get("cache_read_input_tokens")),
            model=model_of(reply),
        )
