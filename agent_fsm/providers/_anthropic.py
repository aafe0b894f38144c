"""
Anthropic's Messages API, translated to and from the engine's OpenAI-wire transcript.

The two formats carry the same facts in different places: the system prompt
is a top-level field; a proposal is a ``tool_use`` content block whose
``input`` is an object (not a JSON string); a tool result is a ``tool_result``
block inside a *user* message, and the results of one turn's calls travel
together in one message. Call ids pass through unchanged both ways, so every
result stays correlated with its call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm.engine.models import ModelReply
from agent_fsm.engine.wire import assistant_text
from agent_fsm.providers._adapter import HttpModel, arguments_object, object_of
from agent_fsm.providers._http import ProviderConfigError, prompt_tokens

__all__ = ["AnthropicMessages", "from_anthropic_message", "to_anthropic_messages"]

ANTHROPIC_VERSION = "2023-06-01"


def _is_error(content: Any) -> bool:
    """Whether a tool message reports a failure (the engine's ``{"ok": false, ...}`` payload)."""
    if not isinstance(content, str):
        return False
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("ok") is False


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return [{"type": "text", "text": p["text"]} for p in content if isinstance(p, Mapping) and p.get("text")]
    text = str(content)
    return [{"type": "text", "text": text}] if text else []


def _assistant_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    blocks = _text_blocks(message.get("content"))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        call = object_of(call) or {}
        function = object_of(call.get("function")) or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id", "")),
                "name": str(function.get("name", "")),
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
            if _is_error(content):
                result["is_error"] = True
            role, blocks = "user", [result]
        else:
            role, blocks = "user", _text_blocks(message.get("content"))
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
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

    Text blocks are joined into ``content``; each ``tool_use`` becomes a
    ``tool_calls`` entry with the same id and its ``input`` serialized to the
    JSON string the wire carries. Other blocks (thinking, server tools) are
    left out. Returns ``None`` when ``content`` is not a list of blocks.
    """
    content = reply.get("content")
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        block = object_of(block) or {}
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            arguments = block.get("input")
            text = json.dumps(arguments) if isinstance(arguments, dict) else arguments
            calls.append(
                {"id": block.get("id"), "type": "function", "function": {"name": block.get("name"), "arguments": text}}
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return message


class AnthropicMessages(HttpModel):
    """
    A model behind Anthropic's ``POST {base_url}/v1/messages``.

    Environment: ``ANTHROPIC_BASE_URL`` (default ``https://api.anthropic.com``),
    ``ANTHROPIC_MODEL``, ``ANTHROPIC_API_KEY`` (sent as ``x-api-key``).
    ``max_tokens`` is required by the API and defaults to 1024.
    See :class:`HttpModel` for the transport options.
    """

    provider = "anthropic"
    base_url_env = "ANTHROPIC_BASE_URL"
    default_base_url = "https://api.anthropic.com"
    model_env = "ANTHROPIC_MODEL"
    api_key_env = "ANTHROPIC_API_KEY"
    path = "/v1/messages"

    def __init__(self, *, max_tokens: int = 1024, **options: Any) -> None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ProviderConfigError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        super().__init__(**options)
        self.max_tokens = max_tokens

    def headers(self) -> dict[str, str]:
        """``x-api-key`` (when a key is set) and the API version."""
        key = self._http.api_key
        return {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {})}

    def request_body(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """System text apart, the rest as alternating messages, tools with ``input_schema``."""
        system, converted = to_anthropic_messages(messages)
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": converted}
        if system is not None:
            body["system"] = system
        if tools:
            body["tools"] = to_anthropic_tools(tools)
        return self._with_options(body)

    def read_reply(self, data: Any, status: int = 200) -> ModelReply:
        """The reply's blocks as one assistant message; the prompt size from ``usage``."""
        reply = object_of(data)
        if reply is None:
            raise self._bad(f"expected a JSON object with 'content', got {type(data).__name__}", status)
        message = from_anthropic_message(reply)
        if message is None:
            raise self._bad(f"the reply has no content blocks (keys: {sorted(reply)})", status)
        if message["content"] is None and "tool_calls" not in message:
            reason = reply.get("stop_reason")
            raise self._bad(f"the reply has neither text nor tool_use blocks (stop_reason={reason!r})", status)
        usage = object_of(reply.get("usage")) or {}
        counted = prompt_tokens(usage.get("input_tokens"))
        if counted is not None:
            # Cached prompt parts are reported apart; the prompt's size is the sum.
            for key in ("cache_creation_input_tokens", "cache_read_input_tokens"):
                counted += prompt_tokens(usage.get(key)) or 0
        return ModelReply(message, prompt_tokens=counted)
