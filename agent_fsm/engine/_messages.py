"""
Observations and token accounting, and the OpenAI-compatible wire format with a parser that never raises.

Observations (what happened when a call was attempted) and token accounting.


[wire]
The OpenAI-compatible message format, and a parser that never raises on model text.

An assistant message proposes tool calls as data: each entry carries an id
(echoed back by the tool message that answers it), a tool name, and the
arguments as a JSON *string* the model generated. Everything in it may be
broken; broken parts become proposals that fail validation, never exceptions.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from agent_fsm.engine._json import DEPTH_CEILING, argument_problem, describe, nesting_exceeds, storable
from agent_fsm.engine._tools import ToolCall

if TYPE_CHECKING:  # a result is formatted here with the transcript, never built
    from agent_fsm.engine._state import RunResult

__all__ = [
    "CallIds",
    "Observation",
    "ObservationKind",
    "TokenEstimator",
    "answer_message",
    "assistant_text",
    "estimate_tokens",
    "INVALID_OUTPUT_HEAD",
    "format_result",
    "format_transcript",
    "invalid_output_message",
    "normalise_reply",
    "parse_tool_calls",
    "to_json_data",
    "tool_call_message",
    "tool_message",
]


# --- observe ---

ObservationKind = Literal["result", "invalid", "denied", "error"]
_KINDS = ("result", "invalid", "denied", "error")


def to_json_data(value: Any) -> Any:
    """
    ``value`` as plain JSON data (dicts, lists, str, numbers, bools, None).

    Observations are stored as JSON data so that a saved run reads back
    exactly as it was. Plain data is copied as is (no JSON round trip);
    objects JSON cannot hold are stored as their ``str``, and a value that
    cannot be stored at all (a cycle, a tuple key, ``NaN``) as its text form:
    see :func:`agent_fsm.engine._json.storable`, which also says whether
    text stood in.
    """
    return storable(value)[0]


@attrs.frozen
class Observation:
    """
    What came of trying a single tool call, typed, and tied to its ``call_id``.

    ``kind`` tells a denial (the gate refused) from an invalid proposal
    (it broke the contract) from an error (the handler failed in an expected
    way) from a result; a policy that only sees "failed" can only retry blindly.
    ``permanent`` marks an ``error`` the tool declared unrecoverable
    (``ToolError(..., permanent=True)``); such an error ends the run ``handoff``.
    ``text_form`` marks content that is a text rendering of what the handler
    returned, because JSON could not hold it (the effect happened all the same).
    """

    call_id: str
    ok: bool
    kind: ObservationKind = attrs.field(validator=attrs.validators.in_(_KINDS))
    content: Any
    permanent: bool = attrs.field(default=False, kw_only=True)
    text_form: bool = attrs.field(default=False, kw_only=True)

    def wire_content(self) -> str:
        """The text of the tool message that carries this observation to the model."""
        data = {"ok": self.ok, "kind": self.kind, "content": self.content}
        if self.permanent:
            data["permanent"] = True
        if self.text_form:
            data["text_form"] = True
        return json.dumps(data)


TokenEstimator = Callable[[Mapping[str, Any]], int]
"""Estimates the prompt tokens one wire message costs. Called once per message."""


def estimate_tokens(message: Mapping[str, Any]) -> int:
    """
    Four characters of serialized JSON per token, rounded up.

    Crude but monotone: the transcript, and so the price of the next turn,
    only grows. Replace it with a real tokenizer through ``run(estimator=...)``.
    """
    return -(-len(json.dumps(message)) // 4)


# --- wire ---

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


INVALID_OUTPUT_HEAD = '{"ok": false, "kind": "invalid", "content": '
"""How the message sending an invalid typed answer back begins: a saved state's count of them is checked by it."""


def invalid_output_message(reason: str) -> Message:
    """The user message that sends an invalid typed answer back to the model, read as a tool's invalid observation."""
    return {
        "role": "user",
        "content": json.dumps({"ok": False, "kind": "invalid", "content": reason}, ensure_ascii=False),
    }


def assistant_text(message: Mapping[str, Any]) -> str | None:
    """The text of an assistant message: ``content`` if a string, text parts joined if a list."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        return "".join(parts)
    return str(content)


def _text_of(raw: Any) -> str:
    # The text that stands for arguments a server sent already parsed; never raises.
    try:
        return json.dumps(raw, default=str)
    except (TypeError, ValueError, RecursionError):
        return describe(raw)  # cyclic, too deep, or keys JSON cannot write


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# Python's json reads NaN and Infinity; arguments holding them are kept as text only (and refused),
# so a saved state stays strict JSON. One decoder, built once: json.loads(..., parse_constant=) builds one per call.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _storable(value: Any) -> bool:
    # What may be kept as parsed data in a state that must save: plain JSON, finite, not too deep.
    return argument_problem(value, max_depth=DEPTH_CEILING) is None


def _parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    if type(raw) is not str:
        if isinstance(raw, Mapping):  # some servers send parsed arguments; accept them as they are
            arguments = dict(raw)
            # Not plain JSON data (cyclic, too deep, NaN, a set ...): kept only as text, refused as unparsed.
            return (arguments if _storable(arguments) else None), _text_of(raw)
        if not isinstance(raw, str):
            return None, None if raw is None else describe(raw)
    if not raw or raw.isspace():  # an empty argument string is how a no-argument call often arrives
        return {}, raw
    try:
        parsed = _DECODER.decode(raw)
    except (ValueError, RecursionError):
        return None, raw
    if not isinstance(parsed, dict):
        return None, raw
    # Each level of nesting needs a bracket, so counting them is a cheap bound before walking.
    if raw.count("{") + raw.count("[") > DEPTH_CEILING and nesting_exceeds(parsed, DEPTH_CEILING):
        return None, raw
    return parsed, raw


class CallIds:
    """
    The tool-call ids a transcript holds, handing out unique ones.

    ``claim(wanted)`` returns ``wanted`` if it is free, else the first free
    ``wanted~2``, ``wanted~3`` ... Deterministic, and the same after a resume
    (rebuilt from the messages) as in memory; a counter per id keeps a model
    that reuses one id every turn from making each claim scan all earlier ones.
    """

    __slots__ = ("_next", "used")

    def __init__(self, used: set[str] | None = None) -> None:
        self.used: set[str] = set() if used is None else used
        self._next: dict[str, int] = {}

    @classmethod
    def of(cls, messages: list[Message]) -> CallIds:
        """The ids the assistant messages of ``messages`` carry."""
        used: set[str] = set()
        for message in messages:
            calls = message.get("tool_calls") if isinstance(message, Mapping) else None
            if isinstance(calls, list):
                used.update(c["id"] for c in calls if isinstance(c, Mapping) and isinstance(c.get("id"), str))
        return cls(used)

    def claim(self, wanted: str) -> str:
        """A free id, ``wanted`` if possible; it is taken from then on."""
        candidate, n = wanted, self._next.get(wanted, 1)
        while candidate in self.used:
            n += 1
            candidate = f"{wanted}~{n}"
        if n > 1:
            self._next[wanted] = n
        self.used.add(candidate)
        return candidate


def _extras(part: Mapping[str, Any], known: frozenset[str]) -> Message:
    """
    The provider's fields beside the ones the engine rewrites (reasoning, refusal, signed thinking blocks), copied.

    Kept as they came: some providers refuse the next turn without them. One
    that is not plain JSON data, or nests past DEPTH_CEILING, could not be
    saved, and is dropped.
    """
    return {k: copy.deepcopy(v) for k, v in part.items() if k not in known and isinstance(k, str) and _storable(v)}


def normalise_reply(reply: Any, turn: int, taken: CallIds | None = None) -> tuple[Message, list[ToolCall]]:
    """
    Turn whatever the model returned into a well-formed assistant message and its proposals.

    The stored message keeps every proposal the model made, with repairs so
    the transcript stays valid wire format: a call without a usable id gets
    ``call_<turn>_<index>``, the arguments are always a string, and call ids
    are unique. ``taken`` holds the ids already in the transcript (it is
    updated); an id that is taken, or repeated within the reply, becomes the
    first free ``<id>~2``, ``<id>~3`` ... (see :class:`CallIds`), and the call
    keeps the model's id as ``original_id``. Other fields of the message and
    of each call (a provider's reasoning or signatures) are kept unchanged,
    unless they are not JSON data a saved state can hold. Anything that is not a mapping at
    all is kept as the answer text ``str(reply)``.
    """
    if type(reply) is not dict and not isinstance(reply, Mapping):
        return {"role": "assistant", "content": str(reply)}, []
    content = reply.get("content")  # plain text read here; any other form as assistant_text reads it
    message: Message = {"role": "assistant", "content": content if type(content) is str else assistant_text(reply)}
    if not reply.keys() <= _MESSAGE_KEYS:
        message.update(_extras(reply, _MESSAGE_KEYS))
    raw_calls = reply.get("tool_calls")
    if not raw_calls:
        return message, []
    if not isinstance(raw_calls, list):
        raw_calls = [raw_calls]
    taken = CallIds() if taken is None else taken
    calls: list[ToolCall] = []
    wire_calls: list[Message] = []
    for index, item in enumerate(raw_calls):
        if type(item) is not dict and not isinstance(item, Mapping):
            item = {}
        function = item.get("function")
        if type(function) is not dict and not isinstance(function, Mapping):
            function = {}
        sent = item.get("id")
        wanted = sent if isinstance(sent, str) and sent else f"call_{turn}_{index}"
        call_id = taken.claim(wanted)
        renamed = sent if call_id != wanted and isinstance(sent, str) and sent else None
        name = function.get("name")
        name = name if isinstance(name, str) else ""
        arguments, raw = _parse_arguments(function.get("arguments"))
        text = raw if raw is not None else ""
        calls.append(ToolCall(call_id, name, arguments, text, original_id=renamed))
        wire: Message = {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}
        if not item.keys() <= _CALL_KEYS:
            wire.update(_extras(item, _CALL_KEYS))
        wire_calls.append(wire)
    message["tool_calls"] = wire_calls
    return message, calls


def parse_tool_calls(message: Mapping[str, Any]) -> list[ToolCall]:
    """The proposals in an assistant message (empty for a plain answer). Never raises."""
    return normalise_reply(message, 0)[1]


# --- transcript ---

_LABELS = {"system": "system", "user": "user", "assistant": "model", "tool": "tool"}


def format_transcript(messages: Iterable[Mapping[str, Any]]) -> str:
    """The transcript as aligned lines: ``role | text`` and ``model | -> tool {arguments}``."""
    lines = []
    for message in messages:
        label = f"{_LABELS.get(message.get('role', ''), str(message.get('role')))[:6]:6} |"
        content = message.get("content")
        if message.get("role") == "assistant":
            if content:
                lines.append(f"{label} {content}")
            for item in message.get("tool_calls") or ():
                function = item.get("function", {})
                lines.append(f"{label} -> {function.get('name')} {function.get('arguments')}  [{item.get('id')}]")
        else:
            lines.append(f"{label} {content if isinstance(content, str) else json.dumps(content)}")
    return "\n".join(lines)


def format_result(result: RunResult, effects: Iterable[Any] | None = None) -> str:
    """Transcript, typed ending, counters and (when given) the effect log."""
    state = result.state
    lines = [format_transcript(state.messages), ""]
    lines.append(
        f"stop={result.stop.value}  turns={state.turns}  tool_attempts={state.tool_attempts}"
        f"  observations={len(state.observations)}"
    )
    if result.code != result.stop.value:
        lines.append(f"code: {result.code}")
    if result.answer is not None:
        lines.append(f"answer: {result.answer}")
    if result.blocked_on is not None:
        lines.append(f"blocked on: {result.blocked_on.name} {json.dumps(result.blocked_on.arguments)}")
    if state.fault is not None:
        lines.append(f"provider fault: {state.fault.type} ({state.fault.kind}): {state.fault.message}")
    if effects is not None:
        lines.append(f"effect log: {json.dumps(list(effects))}")
    return "\n".join(lines)
