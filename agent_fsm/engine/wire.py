"""
The OpenAI-compatible message format, and a parser that never raises on model text.

An assistant message proposes tool calls as data: each entry carries an id
(echoed back by the tool message that answers it), a tool name, and the
arguments as a JSON *string* the model generated. Everything in it may be
broken; broken parts become proposals that fail validation, never exceptions.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from agent_fsm.engine.observe import Observation
from agent_fsm.engine.tools import ToolCall

__all__ = [
    "answer_message",
    "assistant_text",
    "normalise_reply",
    "parse_tool_calls",
    "tool_call_message",
    "tool_message",
]

Message = dict[str, Any]

_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls"})
_CALL_KEYS = frozenset({"id", "type", "function"})


def tool_call_message(
    call_id: str, name: str, arguments: Mapping[str, Any] | str, thought: str | None = None
) -> Message:
    """
    An assistant message proposing one tool call, shaped as a chat API sends it.

    ``arguments`` is serialized to the JSON string the wire carries; pass a
    ``str`` to send text verbatim (for example broken JSON, to test a parser).
    ``thought`` rides in ``content`` beside the call, as ReAct-style reasoning does.
    """
    text = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
    return {
        "role": "assistant",
        "content": thought,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}],
    }


def answer_message(text: str) -> Message:
    """A bare assistant reply: text only, with no tool call attached."""
    return {"role": "assistant", "content": text}


def tool_message(observation: Observation) -> Message:
    """The tool message that carries ``observation`` back to the model."""
    return {"role": "tool", "tool_call_id": observation.call_id, "content": observation.wire_content()}


def assistant_text(message: Mapping[str, Any]) -> str | None:
    """The text of an assistant message: ``content`` if a string, text parts joined if a list."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        return "".join(parts)
    return str(content)


def _parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    if isinstance(raw, Mapping):  # some servers send parsed arguments; accept them as they are
        return dict(raw), json.dumps(raw, default=str)
    if not isinstance(raw, str):
        return None, None if raw is None else repr(raw)
    if raw.strip() == "":  # an empty argument string is how a no-argument call often arrives
        return {}, raw
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        return None, raw
    return (parsed if isinstance(parsed, dict) else None), raw


def normalise_reply(reply: Any, turn: int) -> tuple[Message, list[ToolCall]]:
    """
    Turn whatever the model returned into a well-formed assistant message and its proposals.

    The stored message keeps every proposal the model made, with two repairs
    so the transcript stays valid wire format: a call without a usable id gets
    ``call_<turn>_<index>``, and the arguments are always a string. Other
    fields of the message and of each call (a provider's reasoning or
    signatures) are kept unchanged. Anything that is not a mapping at all is
    kept as the answer text ``str(reply)``.
    """
    if not isinstance(reply, Mapping):
        return {"role": "assistant", "content": str(reply)}, []
    message: Message = {"role": "assistant", "content": assistant_text(reply)}
    # Provider parts beside the text (reasoning, refusal, signed thinking blocks)
    # are kept as they came: some providers refuse the next turn without them.
    message.update({k: copy.deepcopy(v) for k, v in reply.items() if k not in _MESSAGE_KEYS and isinstance(k, str)})
    raw_calls = reply.get("tool_calls")
    if not raw_calls:
        return message, []
    if not isinstance(raw_calls, list):
        raw_calls = [raw_calls]
    calls: list[ToolCall] = []
    wire_calls: list[Message] = []
    for index, item in enumerate(raw_calls):
        item = item if isinstance(item, Mapping) else {}
        function = item.get("function")
        function = function if isinstance(function, Mapping) else {}
        call_id = item.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{turn}_{index}"
        name = function.get("name")
        name = name if isinstance(name, str) else ""
        arguments, raw = _parse_arguments(function.get("arguments"))
        text = raw if raw is not None else ""
        calls.append(ToolCall(call_id, name, arguments, text))
        extras = {k: copy.deepcopy(v) for k, v in item.items() if k not in _CALL_KEYS and isinstance(k, str)}
        wire_calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": text}, **extras})
    message["tool_calls"] = wire_calls
    return message, calls


def parse_tool_calls(message: Mapping[str, Any]) -> list[ToolCall]:
    """The proposals in an assistant message (empty for a plain answer). Never raises."""
    return normalise_reply(message, 0)[1]
