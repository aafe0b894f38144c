"""
The saved-state format: strict JSON out, a validating reader in, an optional HMAC signature.

A saved state is data that may have been edited, truncated or forged. The
reader checks every field without coercion (``"5"``, ``5.9`` and ``true``
are not counts), knows every machine state, and checks that the counters
agree with the transcript; the first problem is reported by its dotted path.
It is written by hand, one small function per field, because it runs on
every load of every paused run and must cost little more than ``json.loads``.
What the reader cannot tell is whether a well-formed state is *authentic*;
a signature (``key=``) can, and the driver never takes authority from a
state either way (see docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any

import attrs

from agent_fsm.engine.approval import call_fingerprint
from agent_fsm.engine.limits import Limits
from agent_fsm.engine.machine import RUN_MACHINE
from agent_fsm.engine.observe import Observation
from agent_fsm.engine.state import FORMAT, Judgement, Pause, ProviderFault, RunState
from agent_fsm.engine.tools import ToolCall

__all__ = ["dump_state", "load_state", "state_problem"]

STATES = frozenset(s.name for s in RUN_MACHINE.states)
_KINDS = ("result", "invalid", "denied", "error")
_JUDGEMENTS = ("invalid", "denied", "ask", "allow")
_SIGNED = re.compile(r'\{"signature":"([0-9a-f]{64})","state":')
_SIGNED_PREFIX = len('{"signature":"') + 64 + len('","state":')


class _Bad(Exception):
    def __init__(self, path: str, detail: str) -> None:
        super().__init__(path, detail)
        self.path = path
        self.detail = detail


def _show(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} (a JSON {_json_kind(value)})"


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _expect(path: str, expected: str, value: Any) -> _Bad:
    return _Bad(path, f"expected {expected}, got {_show(value)}")


# --- field readers: each checks one value and returns it as the state holds it ---


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
                raise _Bad(f"{path}.{name}" if path else name, "missing")
        for name in value:
            if name not in shape[1]:
                raise _Bad(f"{path}.{name}" if path else name, f"unknown field (known: {', '.join(shape[0])})")
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


def _generic(field: attrs.Attribute[Any], value: Any, path: str) -> Any:
    """A field this reader has no rule for (added later): held to the type of its default."""
    default: Any = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default = default.factory()
    if default is attrs.NOTHING or default is None:
        return value
    if isinstance(default, bool):
        return _bool(value, path)
    if isinstance(default, int):
        return _int(value, path, None)
    if isinstance(default, str):
        return _str(value, path)
    if isinstance(default, list):
        return _list(value, path)
    if isinstance(default, dict) and type(value) is not dict:
        raise _expect(path, "an object", value)
    return value


def _extra(cls: type, known: tuple[str, ...]) -> tuple[attrs.Attribute[Any], ...]:
    """Fields of ``cls`` this reader has no rule for (added after it was written)."""
    return tuple(f for f in attrs.fields(cls) if f.name not in known)


def _record(
    cls: type, extra: tuple[attrs.Attribute[Any], ...], known: dict[str, Any], data: dict[str, Any], path: str
) -> Any:
    for field in extra:
        known[field.alias or field.name] = _generic(field, data[field.name], f"{path}.{field.name}")
    try:
        return cls(**known)
    except (TypeError, ValueError) as exc:
        raise _Bad(path, str(exc)) from None


_OBSERVATION_EXTRA = _extra(Observation, ("call_id", "ok", "kind", "content", "permanent"))
_CALL_EXTRA = _extra(ToolCall, ("call_id", "name", "arguments", "raw_arguments"))


def _observation(value: Any, path: str) -> Observation:
    data = _object(value, path, _OBSERVATION_SHAPE)
    kind = data["kind"]
    if kind not in _KINDS:
        raise _expect(f"{path}.kind", f"one of {', '.join(_KINDS)}", kind)
    ok = _bool(data["ok"], f"{path}.ok")
    if ok != (kind == "result"):
        raise _Bad(f"{path}.ok", f"{ok} disagrees with kind {kind!r} (only a result is ok)")
    known = {
        "call_id": _str(data["call_id"], f"{path}.call_id"),
        "ok": ok,
        "kind": kind,
        "content": data["content"],
        "permanent": _bool(data["permanent"], f"{path}.permanent"),
    }
    result: Observation = _record(Observation, _OBSERVATION_EXTRA, known, data, path)
    return result


def _call(value: Any, path: str) -> ToolCall:
    data = _object(value, path, _CALL_SHAPE)
    arguments = data["arguments"]
    if arguments is not None and type(arguments) is not dict:
        raise _expect(f"{path}.arguments", "an object or null", arguments)
    known = {
        "call_id": _str(data["call_id"], f"{path}.call_id"),
        "name": _str(data["name"], f"{path}.name"),
        "arguments": arguments,
        "raw_arguments": _opt_str(data["raw_arguments"], f"{path}.raw_arguments"),
    }
    result: ToolCall = _record(ToolCall, _CALL_EXTRA, known, data, path)
    return result


def _messages(value: Any, path: str) -> list[dict[str, Any]]:
    for index, message in enumerate(_list(value, path)):
        if type(message) is not dict:
            raise _expect(f"{path}.{index}", "a message object", message)
        if type(message.get("role")) is not str:
            raise _expect(f"{path}.{index}.role", "a string", message.get("role"))
    return value  # type: ignore[no-any-return]


def _machine_state(value: Any, path: str) -> str:
    if value not in STATES or type(value) is not str:
        raise _expect(path, "a state of the run machine", value)
    return str(value)


def _judgement(value: Any, path: str) -> Judgement | None:
    if value is None:
        return None
    data = _object(value, path, _JUDGEMENT_SHAPE)
    if data["kind"] not in _JUDGEMENTS:
        raise _expect(f"{path}.kind", f"one of {', '.join(_JUDGEMENTS)}", data["kind"])
    return Judgement(data["kind"], _str(data["reason"], f"{path}.reason"))


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


def _limits(value: Any, path: str) -> Limits | None:
    if value is None:
        return None
    # Fields added to Limits later are optional here, so older saved states still load.
    data = _object(value, path, _LIMITS_SHAPE, _LIMITS_SHAPE[1])
    key = tuple((name, type(item), item) for name, item in data.items())
    try:
        return _LIMITS_SEEN[key]  # Limits are frozen: runs saved under the same budgets share one
    except (KeyError, TypeError):
        pass
    try:
        limits = Limits(**data)
    except (TypeError, ValueError) as exc:
        raise _Bad(path, str(exc)) from None
    if len(_LIMITS_SEEN) >= 256:
        _LIMITS_SEEN.clear()
    _LIMITS_SEEN[key] = limits
    return limits


_LIMITS_SEEN: dict[tuple[tuple[str, type, Any], ...], Limits] = {}


def _pause(value: Any, path: str) -> Pause | None:
    if value is None:
        return None
    data = _object(value, path, _PAUSE_SHAPE)
    return Pause(
        _str(data["pause_id"], f"{path}.pause_id"),
        _str(data["fingerprint"], f"{path}.fingerprint"),
        _str(data["reason"], f"{path}.reason"),
    )


def _denials(value: Any, path: str) -> dict[str, int]:
    if type(value) is not dict:
        raise _expect(path, "an object", value)
    for key, count in value.items():
        _int(count, f"{path}.{key}", 1)
    return value


def _ints(value: Any, path: str) -> list[int]:
    for index, item in enumerate(_list(value, path)):
        if type(item) is not int or item < 0:
            raise _expect(f"{path}.{index}", "a whole number >= 0", item)
    return value  # type: ignore[no-any-return]


def _states(value: Any, path: str) -> list[str]:
    for index, item in enumerate(_list(value, path)):
        if item not in STATES or type(item) is not str:
            raise _expect(f"{path}.{index}", "a state of the run machine", item)
    return value  # type: ignore[no-any-return]


def _recent(value: Any, path: str) -> list[str]:
    for index, item in enumerate(_list(value, path)):
        _str(item, f"{path}.{index}")
    if len(value) > 2:
        raise _expect(path, "at most two fingerprints", value)
    return value  # type: ignore[no-any-return]


_KNOWN = (
    "messages",
    "observations",
    "prompt_token_log",
    "turns",
    "tool_attempts",
    "machine_state",
    "path",
    "pending",
    "judgement",
    "denials",
    "answer",
    "opening",
    "fault",
    "message_tokens",
    "usage_offset",
    "limits",
    "pause",
    "run_id",
    "consumed",
    "recent_rejections",
    "alternation",
)
_FIELDS = attrs.fields(RunState)
_STATE_EXTRA = _extra(RunState, _KNOWN)
_TOP = _shape(("format", *(f.name for f in _FIELDS)))


def _read(data: dict[str, Any]) -> RunState:
    # One straight line per field, in the order a saved state lists them, so
    # the first problem found is the first in the document.
    _object(data, "", _TOP)
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
        "limits": _limits(data["limits"], "limits"),
        "pause": _pause(data["pause"], "pause"),
        "run_id": _str(data["run_id"], "run_id"),
        "consumed": _bool(data["consumed"], "consumed"),
        "recent_rejections": _recent(data["recent_rejections"], "recent_rejections"),
        "alternation": _int(data["alternation"], "alternation"),
    }
    for field in _STATE_EXTRA:
        values[field.name] = _generic(field, data[field.name], field.name)
    return RunState(**values)


# --- consistency: counters and indices that must agree with the transcript ---


def state_problem(state: RunState) -> tuple[str, str] | None:
    """
    The first way ``state`` disagrees with itself, as ``(dotted path, what is wrong)``; ``None`` if consistent.

    Checked: counters are whole numbers >= 0; one logged prompt per turn; no
    more assistant replies than turns and no fewer handler attempts than
    executed calls; observations answer this run's tool messages one to one;
    every pending call was proposed by the latest reply, is unanswered and
    carries the reply's text; a pause exactly while awaiting approval, bound
    to the blocked call.
    """
    for name in ("turns", "tool_attempts", "opening", "message_tokens", "alternation"):
        value = getattr(state, name)
        if type(value) is not int or value < 0:
            return name, f"expected a whole number >= 0, got {value!r}"
    if state.machine_state not in STATES:
        return "machine_state", f"expected a state of the run machine, got {state.machine_state!r}"
    messages = state.messages
    if state.opening > len(messages):
        return "opening", f"{state.opening} opening messages but the transcript holds {len(messages)}"
    if len(state.prompt_token_log) != state.turns:
        return "turns", f"{state.turns} model calls but {len(state.prompt_token_log)} prompt sizes logged"
    replies = 0
    answered: list[Any] = []
    last_reply: dict[str, Any] | None = None
    since_reply = 0  # tool messages answering the latest reply
    for message in messages[state.opening :]:
        role = message.get("role")
        if role == "assistant":
            replies += 1
            last_reply = message
            since_reply = 0
        elif role == "tool":
            answered.append(message.get("tool_call_id"))
            since_reply += 1
    if replies > state.turns:
        return "turns", f"{state.turns} model calls but {replies} replies in the transcript"
    observations = state.observations
    if len(answered) != len(observations):
        return "observations", f"{len(observations)} observations but {len(answered)} tool messages in this run"
    executed = 0
    for index, observation in enumerate(observations):
        if not isinstance(observation, Observation):
            return f"observations.{index}", f"expected an Observation, got {observation!r}"
        if observation.call_id != answered[index]:
            return (
                f"observations.{index}.call_id",
                f"{observation.call_id!r} but its tool message answers {answered[index]!r}",
            )
        executed += observation.kind in ("result", "error")
    if state.tool_attempts < executed:
        return "tool_attempts", f"{state.tool_attempts} handler attempts but {executed} calls were executed"
    problem = _pending_problem(state, last_reply, set(answered[len(answered) - since_reply :]))
    if problem is not None:
        return problem
    paused = state.machine_state == "AwaitingApproval"
    if paused and (state.pause is None or not state.pending):
        return "pause", "a run awaiting approval must hold its pause and the blocked call"
    if not paused and state.pause is not None:
        return "pause", f"a pause is recorded but the run is in {state.machine_state!r}"
    if state.pause is not None and state.pause.fingerprint != call_fingerprint(state.pending[0]):
        return "pause.fingerprint", "does not match the blocked call (the call or the pause was edited)"
    return None


def _pending_problem(state: RunState, reply: dict[str, Any] | None, answered: set[Any]) -> tuple[str, str] | None:
    if not state.pending:
        return None
    proposed: dict[Any, Any] = {}
    for item in (reply or {}).get("tool_calls") or ():
        if isinstance(item, dict):
            proposed[item.get("id")] = item.get("function")
    for index, call in enumerate(state.pending):
        path = f"pending.{index}"
        if not isinstance(call, ToolCall):
            return path, f"expected a ToolCall, got {call!r}"
        function = proposed.get(call.call_id)
        if not isinstance(function, dict):
            return f"{path}.call_id", f"{call.call_id!r} was not proposed by the latest reply"
        if call.call_id in answered:
            return f"{path}.call_id", f"{call.call_id!r} was already answered"
        if function.get("name") != call.name:
            return f"{path}.name", f"{call.name!r} but the reply proposed {function.get('name')!r}"
        if function.get("arguments") != call.raw_arguments:
            return f"{path}.raw_arguments", "differs from the arguments text of the reply"
        if call.arguments is not None and not _same_arguments(call.raw_arguments, call.arguments):
            return f"{path}.arguments", "differ from the arguments the reply's text holds"
    return None


def _same_arguments(raw: str | None, arguments: dict[str, Any]) -> bool:
    if raw is None or not raw.strip():
        return arguments == {} or raw is None
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        return True  # text the engine could not parse either; the arguments are judged afresh anyway
    return bool(parsed == arguments) or json.dumps(parsed, sort_keys=True) == json.dumps(arguments, sort_keys=True)


# --- the two entry points ------------------------------------------------------


def _key(key: Any) -> bytes:
    if not isinstance(key, bytes) or not key:
        raise TypeError(f"'key' must be non-empty bytes (got {type(key).__name__})")
    return key


def _sign(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def _attrs_data(value: Any) -> Any:
    return None if value is None else attrs.asdict(value)


def _state_data(s: RunState) -> dict[str, Any]:
    data = {
        "format": FORMAT,
        "messages": s.messages,
        "observations": [
            {"call_id": o.call_id, "ok": o.ok, "kind": o.kind, "content": o.content, "permanent": o.permanent}
            for o in s.observations
        ],
        "prompt_token_log": s.prompt_token_log,
        "turns": s.turns,
        "tool_attempts": s.tool_attempts,
        "machine_state": s.machine_state,
        "path": s.path,
        "pending": [
            {"call_id": c.call_id, "name": c.name, "arguments": c.arguments, "raw_arguments": c.raw_arguments}
            for c in s.pending
        ],
        "judgement": None if s.judgement is None else {"kind": s.judgement.kind, "reason": s.judgement.reason},
        "denials": s.denials,
        "answer": s.answer,
        "opening": s.opening,
        "fault": _attrs_data(s.fault),
        "message_tokens": s.message_tokens,
        "usage_offset": s.usage_offset,
        "limits": _attrs_data(s.limits),
        "pause": _attrs_data(s.pause),
        "run_id": s.run_id,
        "consumed": s.consumed,
        "recent_rejections": s.recent_rejections,
        "alternation": s.alternation,
    }
    if _OBSERVATION_EXTRA:
        for item, o in zip(data["observations"], s.observations, strict=True):
            item.update({f.name: getattr(o, f.name) for f in _OBSERVATION_EXTRA})
    if _CALL_EXTRA:
        for item, c in zip(data["pending"], s.pending, strict=True):
            item.update({f.name: getattr(c, f.name) for f in _CALL_EXTRA})
    for field in _STATE_EXTRA:
        value = getattr(s, field.name)
        data[field.name] = attrs.asdict(value) if attrs.has(type(value)) else value
    return data


_ENCODER = json.JSONEncoder(allow_nan=False)


def dump_state(state: RunState, key: bytes | None) -> str:
    """``state`` as strict JSON, signed when ``key`` is given (see :meth:`RunState.to_json`)."""
    try:
        text = _ENCODER.encode(_state_data(state))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"the run state cannot be saved as strict JSON: {exc}") from exc
    if key is None:
        return text
    return f'{{"signature":"{_sign(_key(key), text)}","state":{text}}}'


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a strict saved state holds no NaN or Infinity)")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def load_state(text: Any, key: bytes | None) -> RunState:
    """Read and check a saved state (see :meth:`RunState.from_json`)."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise ValueError(f"a saved run state is JSON text; got {type(text).__name__}")
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8", errors="replace")
    if key is not None:
        found = _SIGNED.match(text)
        if found is None or not text.endswith("}"):
            raise ValueError("saved run state is not signed (a key was given, so a signature is required)")
        inner = text[_SIGNED_PREFIX:-1]
        if not hmac.compare_digest(found.group(1), _sign(_key(key), inner)):
            raise ValueError("saved run state's signature does not match: it was altered, or signed with another key")
        text = inner
    try:
        data = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"saved run state is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"not a saved agent_fsm run state: expected a JSON object, got a JSON {_json_kind(data)}")
    if "signature" in data and "format" not in data:
        raise ValueError("this saved run state is signed: read it with RunState.from_json(text, key=...)")
    if data.get("format") != FORMAT or type(data.get("format")) is not int:
        raise ValueError(f"not a saved agent_fsm run state (format {FORMAT} expected, got {data.get('format')!r})")
    try:
        state = _read(data)
    except _Bad as bad:
        raise ValueError(f"saved run state is malformed at {bad.path}: {bad.detail}") from None
    problem = state_problem(state)
    if problem is not None:
        raise ValueError(f"saved run state is inconsistent at {problem[0]}: {problem[1]}")
    return state
