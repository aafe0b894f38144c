"""
The strict reader of a saved run state: one small function per field, nothing coerced.

``"5"``, ``5.9`` and ``true`` are not counts; an unknown machine state, a
missing or extra field is refused; the first problem is reported by its
dotted path. It is written by hand because it runs on every load of every
paused run and must cost little more than ``json.loads`` itself. Fields
added to the state classes later, that this reader has no rule for, are
held to the type of their default.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import attrs

from agent_fsm.engine.consistency import STATES
from agent_fsm.engine.endings import CODE_PATTERN
from agent_fsm.engine.limits import Limits
from agent_fsm.engine.observe import Observation
from agent_fsm.engine.state import Judgement, Pause, ProviderFault, RunState
from agent_fsm.engine.tools import ToolCall

__all__ = ["CALL_EXTRA", "OBSERVATION_EXTRA", "STATE_EXTRA", "BadField", "json_kind", "read_limits", "read_state"]

_KINDS = ("result", "invalid", "denied", "error")
_JUDGEMENTS = ("invalid", "denied", "ask", "allow")


class BadField(Exception):
    """The first problem found: its dotted ``path`` and what is wrong there."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(path, detail)
        self.path = path
        self.detail = detail


def _show(value: Any) -> str:
    text = repr(value)
    return f"{text if len(text) <= 60 else text[:57] + '...'} (a JSON {json_kind(value)})"


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _expect(path: str, expected: str, value: Any) -> BadField:
    return BadField(path, f"expected {expected}, got {_show(value)}")


def _str(value: Any, path: str) -> str:
    if type(value) is not str:
        raise _expect(path, "a string", value)
    return value


def _opt_str(value: Any, path: str) -> str | None:
    return None if value is None else _str(value, path)


def _bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise _expect(path, "true or false", value)
    return value


def _int(value: Any, path: str, minimum: int | None = 0) -> int:
    if type(value) is not int:
        raise _expect(path, "a whole number", value)
    if minimum is not None and value < minimum:
        raise _expect(path, f"a whole number >= {minimum}", value)
    return value


def _list(value: Any, path: str) -> list[Any]:
    if type(value) is not list:
        raise _expect(path, "an array", value)
    return value


Shape = tuple[tuple[str, ...], frozenset[str]]


def _shape(names: tuple[str, ...]) -> Shape:
    return names, frozenset(names)


def _object(value: Any, path: str, shape: Shape, optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    if type(value) is not dict:
        raise _expect(path, "an object", value)
    if value.keys() != shape[1]:
        for name in shape[0]:
            if name not in value and name not in optional:
                raise BadField(f"{path}.{name}" if path else name, "missing")
        for name in value:
            if name not in shape[1]:
                raise BadField(f"{path}.{name}" if path else name, f"unknown field (known: {', '.join(shape[0])})")
    return value


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in attrs.fields(cls))


_OBSERVATION = _names(Observation)
_CALL = _names(ToolCall)
_LIMITS = _names(Limits)
_OBSERVATION_SHAPE = _shape(_OBSERVATION)
_CALL_SHAPE = _shape(_CALL)
_LIMITS_SHAPE = _shape(_LIMITS)
_JUDGEMENT_SHAPE = _shape(("kind", "reason"))
_FAULT_SHAPE = _shape(("type", "kind", "message", "status"))
_PAUSE_SHAPE = _shape(("pause_id", "fingerprint", "reason"))


Reader = Callable[[Any, str], Any]


def _any(value: Any, path: str) -> Any:
    return value


def _object_of(value: Any, path: str) -> Any:
    if type(value) is not dict:
        raise _expect(path, "an object", value)
    return value


def _generic(field: attrs.Attribute[Any]) -> Reader:
    """The reader of a field this module has no rule for (added later): held to the type of its default."""
    default: Any = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default = default.factory()
    if default is None and str(field.type) in ("str | None", "Optional[str]"):
        return _opt_str
    if default is attrs.NOTHING or default is None:
        return _any
    if isinstance(default, bool):
        return _bool
    if isinstance(default, int):
        return functools.partial(_int, minimum=None)
    if isinstance(default, str):
        return _str
    if isinstance(default, list):
        return _list
    if isinstance(default, dict):
        return _object_of
    return _any


def _extra(cls: type, known: tuple[str, ...]) -> tuple[attrs.Attribute[Any], ...]:
    """Fields of ``cls`` this reader has no rule for (added after it was written)."""
    return tuple(f for f in attrs.fields(cls) if f.name not in known)


def _readers(extra: tuple[attrs.Attribute[Any], ...]) -> tuple[tuple[str, str, Reader], ...]:
    # Decided once per field, not once per record read: (saved name, argument name, reader).
    return tuple((f.name, f.alias or f.name, _generic(f)) for f in extra)


def _record(
    cls: type, extra: tuple[tuple[str, str, Reader], ...], known: dict[str, Any], data: dict[str, Any], path: str
) -> Any:
    for name, argument, read in extra:
        known[argument] = read(data[name], f"{path}.{name}")
    try:
        return cls(**known)
    except (TypeError, ValueError) as exc:
        raise BadField(path, str(exc)) from None


OBSERVATION_EXTRA = _extra(Observation, ("call_id", "ok", "kind", "content", "permanent"))
CALL_EXTRA = _extra(ToolCall, ("call_id", "name", "arguments", "raw_arguments"))
_OBSERVATION_READERS = _readers(OBSERVATION_EXTRA)
_CALL_READERS = _readers(CALL_EXTRA)


# The records below are read once per saved call: their checks are written out,
# and a field's dotted path is only spelled when it is reported.


def _observation(value: Any, path: str) -> Observation:
    data = _object(value, path, _OBSERVATION_SHAPE)
    kind = data["kind"]
    if kind not in _KINDS:
        raise _expect(f"{path}.kind", f"one of {', '.join(_KINDS)}", kind)
    ok = data["ok"]
    if type(ok) is not bool:
        raise _expect(f"{path}.ok", "true or false", ok)
    if ok != (kind == "result"):
        raise BadField(f"{path}.ok", f"{ok} disagrees with kind {kind!r} (only a result is ok)")
    call_id = data["call_id"]
    if type(call_id) is not str:
        raise _expect(f"{path}.call_id", "a string", call_id)
    permanent = data["permanent"]
    if type(permanent) is not bool:
        raise _expect(f"{path}.permanent", "true or false", permanent)
    known = {"call_id": call_id, "ok": ok, "kind": kind, "content": data["content"], "permanent": permanent}
    result: Observation = _record(Observation, _OBSERVATION_READERS, known, data, path)
    return result


def _call(value: Any, path: str) -> ToolCall:
    data = _object(value, path, _CALL_SHAPE)
    arguments = data["arguments"]
    if arguments is not None and type(arguments) is not dict:
        raise _expect(f"{path}.arguments", "an object or null", arguments)
    call_id, name, raw = data["call_id"], data["name"], data["raw_arguments"]
    if type(call_id) is not str:
        raise _expect(f"{path}.call_id", "a string", call_id)
    if type(name) is not str:
        raise _expect(f"{path}.name", "a string", name)
    if raw is not None and type(raw) is not str:
        raise _expect(f"{path}.raw_arguments", "a string", raw)
    known = {"call_id": call_id, "name": name, "arguments": arguments, "raw_arguments": raw}
    result: ToolCall = _record(ToolCall, _CALL_READERS, known, data, path)
    return result


def _messages(value: Any, path: str) -> list[dict[str, Any]]:
    for index, message in enumerate(_list(value, path)):
        if type(message) is not dict:
            raise _expect(f"{path}.{index}", "a message object", message)
        if type(message.get("role")) is not str:
            raise _expect(f"{path}.{index}.role", "a string", message.get("role"))
    return value  # type: ignore[no-any-return]


def _machine_state(value: Any, path: str) -> str:
    if type(value) is not str or value not in STATES:  # a type first: a list is not even hashable
        raise _expect(path, "a state of the run machine", value)
    return value


def _judgement(value: Any, path: str) -> Judgement | None:
    if value is None:
        return None
    data = _object(value, path, _JUDGEMENT_SHAPE)
    kind, reason = data["kind"], data["reason"]
    if kind not in _JUDGEMENTS:
        raise _expect(f"{path}.kind", f"one of {', '.join(_JUDGEMENTS)}", kind)
    if type(reason) is not str:
        raise _expect(f"{path}.reason", "a string", reason)
    return Judgement(kind, reason)


def _fault(value: Any, path: str) -> ProviderFault | None:
    if value is None:
        return None
    data = _object(value, path, _FAULT_SHAPE)
    status = data["status"]
    return ProviderFault(
        _str(data["type"], f"{path}.type"),
        _str(data["kind"], f"{path}.kind"),
        _str(data["message"], f"{path}.message"),
        None if status is None else _int(status, f"{path}.status"),
    )


def read_limits(value: Any, path: str) -> Limits | None:
    """The budgets a state was saved under (``None`` for null); one shared :class:`Limits` per distinct budgets."""
    if value is None:
        return None
    if type(value) is dict:  # budgets seen before (the same names, values and types: True is not 1) were checked
        key = (*value, *value.values(), *map(type, value.values()))
        try:
            return _LIMITS_SEEN[key]  # Limits are frozen: runs saved under the same budgets share one
        except (KeyError, TypeError):
            pass
    # Fields added to Limits later are optional here, so older saved states still load.
    data = _object(value, path, _LIMITS_SHAPE, _LIMITS_SHAPE[1])
    try:
        limits = Limits(**data)
    except (TypeError, ValueError) as exc:
        raise BadField(path, str(exc)) from None
    if len(_LIMITS_SEEN) >= 256:
        _LIMITS_SEEN.clear()
    _LIMITS_SEEN[key] = limits
    return limits


_LIMITS_SEEN: dict[tuple[Any, ...], Limits] = {}


def _pause(value: Any, path: str) -> Pause | None:
    if value is None:
        return None
    data = _object(value, path, _PAUSE_SHAPE)
    for name in _PAUSE_SHAPE[0]:
        if type(data[name]) is not str:
            raise _expect(f"{path}.{name}", "a string", data[name])
    return Pause(data["pause_id"], data["fingerprint"], data["reason"])


def _denials(value: Any, path: str) -> dict[str, int]:
    if type(value) is not dict:
        raise _expect(path, "an object", value)
    for key, count in value.items():
        _int(count, f"{path}.{key}", 1)
    return value


def _code(value: Any, path: str) -> str | None:
    if value is not None and (type(value) is not str or CODE_PATTERN.fullmatch(value) is None):
        raise _expect(path, "null or an ending code (a lowercase identifier)", value)
    return value


def _ints(value: Any, path: str) -> list[int]:
    for index, item in enumerate(_list(value, path)):
        if type(item) is not int or item < 0:
            raise _expect(f"{path}.{index}", "a whole number >= 0", item)
    return value  # type: ignore[no-any-return]


def _states(value: Any, path: str) -> list[str]:
    for index, item in enumerate(_list(value, path)):
        if type(item) is not str or item not in STATES:
            raise _expect(f"{path}.{index}", "a state of the run machine", item)
    return value  # type: ignore[no-any-return]


def _recent(value: Any, path: str) -> list[str]:
    for index, item in enumerate(_list(value, path)):
        _str(item, f"{path}.{index}")
    if len(value) > 2:
        raise _expect(path, "at most two fingerprints", value)
    return value  # type: ignore[no-any-return]


# The fields read_state has a rule for, in the order a saved state lists them.
_KNOWN = (
    "messages", "observations", "prompt_token_log", "turns", "tool_attempts", "machine_state", "path", "pending",
    "judgement", "denials", "answer", "opening", "fault", "message_tokens", "usage_offset", "finish", "code",
    "limits", "pause", "run_id", "consumed", "recent_rejections", "alternation", "elapsed",
)  # fmt: skip
STATE_EXTRA = _extra(RunState, _KNOWN)
_STATE_READERS = _readers(STATE_EXTRA)
_TOP = _shape(("format", *(f.name for f in attrs.fields(RunState))))
_ADDED = frozenset({"elapsed"})  # fields added to format 2 later: a state saved before them still loads


def _seconds(value: Any, path: str) -> float:  # a float field: RunState.elapsed
    if type(value) in (int, float) and 0 <= value < math.inf:
        return float(value)
    raise _expect(path, "a number of seconds >= 0", value)


def read_state(data: dict[str, Any]) -> RunState:
    # One straight line per field, in the order a saved state lists them, so
    # the first problem found is the first in the document.
    _object(data, "", _TOP, _ADDED)
    observations = data["observations"]
    pending = data["pending"]
    values: dict[str, Any] = {
        "messages": _messages(data["messages"], "messages"),
        "observations": [
            _observation(o, f"observations.{i}") for i, o in enumerate(_list(observations, "observations"))
        ],
        "prompt_token_log": _ints(data["prompt_token_log"], "prompt_token_log"),
        "turns": _int(data["turns"], "turns"),
        "tool_attempts": _int(data["tool_attempts"], "tool_attempts"),
        "machine_state": _machine_state(data["machine_state"], "machine_state"),
        "path": _states(data["path"], "path"),
        "pending": [_call(c, f"pending.{i}") for i, c in enumerate(_list(pending, "pending"))],
        "judgement": _judgement(data["judgement"], "judgement"),
        "denials": _denials(data["denials"], "denials"),
        "answer": _opt_str(data["answer"], "answer"),
        "opening": _int(data["opening"], "opening"),
        "fault": _fault(data["fault"], "fault"),
        "message_tokens": _int(data["message_tokens"], "message_tokens"),
        "usage_offset": _int(data["usage_offset"], "usage_offset", None),
        "finish": _opt_str(data["finish"], "finish"),
        "code": _code(data["code"], "code"),
        "limits": read_limits(data["limits"], "limits"),
        "pause": _pause(data["pause"], "pause"),
        "run_id": _str(data["run_id"], "run_id"),
        "consumed": _bool(data["consumed"], "consumed"),
        "recent_rejections": _recent(data["recent_rejections"], "recent_rejections"),
        "alternation": _int(data["alternation"], "alternation"),
        "elapsed": _seconds(data.get("elapsed", 0.0), "elapsed"),
    }
    for name, _argument, read in _STATE_READERS:
        values[name] = read(data[name], name)
    return RunState(**values)
