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
from collections.abc import Callable
from typing import Any

import attrs

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


def _object(value: Any, path: str, fields: tuple[str, ...], optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    if type(value) is not dict:
        raise _expect(path, "an object", value)
    if len(value) != len(fields) or any(name not in value for name in fields):
        for name in fields:
            if name not in value and name not in optional:
                raise _Bad(f"{path}.{name}" if path else name, "missing")
        for name in value:
            if name not in fields:
                raise _Bad(f"{path}.{name}" if path else name, f"unknown field (known: {', '.join(fields)})")
    return value


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in attrs.fields(cls))


_OBSERVATION = _names(Observation)
_CALL = _names(ToolCall)
_LIMITS = _names(Limits)


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


def _record(cls: type, names: tuple[str, ...], known: dict[str, Any], data: dict[str, Any], path: str) -> Any:
    values = dict(known)
    for field in attrs.fields(cls):
        if field.name not in values and field.name in data:
            values[field.name] = _generic(field, data[field.name], f"{path}.{field.name}")
    try:
        return cls(**{(f.alias or f.name): values[f.name] for f in attrs.fields(cls) if f.name in values})
    except (TypeError, ValueError) as exc:
        raise _Bad(path, str(exc)) from None


def _observation(value: Any, path: str) -> Observation:
    data = _object(value, path, _OBSERVATION)
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
    result: Observation = _record(Observation, _OBSERVATION, known, data, path)
    return result


def _call(value: Any, path: str) -> ToolCall:
    data = _object(value, path, _CALL)
    arguments = data["arguments"]
    if arguments is not None and type(arguments) is not dict:
        raise _expect(f"{path}.arguments", "an object or null", arguments)
    known = {
        "call_id": _str(data["call_id"], f"{path}.call_id"),
        "name": _str(data["name"], f"{path}.name"),
        "arguments": arguments,
        "raw_arguments": _opt_str(data["raw_arguments"], f"{path}.raw_arguments"),
    }
    result: ToolCall = _record(ToolCall, _CALL, known, data, path)
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
    data = _object(value, path, ("kind", "reason"))
    if data["kind"] not in _JUDGEMENTS:
        raise _expect(f"{path}.kind", f"one of {', '.join(_JUDGEMENTS)}", data["kind"])
    return Judgement(data["kind"], _str(data["reason"], f"{path}.reason"))


def _fault(value: Any, path: str) -> ProviderFault | None:
    if value is None:
        return None
    data = _object(value, path, ("type", "kind", "message", "status"))
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
    data = _object(value, path, _LIMITS, frozenset(_LIMITS))
    try:
        return Limits(**data)
    except (TypeError, ValueError) as exc:
        raise _Bad(path, str(exc)) from None


def _pause(value: Any, path: str) -> Pause | None:
    if value is None:
        return None
    data = _object(value, path, ("pause_id", "fingerprint", "reason"))
    return Pause(*(_str(data[name], f"{path}.{name}") for name in ("pause_id", "fingerprint", "reason")))


def _denials(value: Any, path: str) -> dict[str, int]:
    if type(value) is not dict:
        raise _expect(path, "an object", value)
    for key, count in value.items():
        _int(count, f"{path}.{key}", 1)
    return value


def _each(read: Callable[[Any, str], Any]) -> Callable[[Any, str], list[Any]]:
    def read_all(value: Any, path: str) -> list[Any]:
        return [read(item, f"{path}.{index}") for index, item in enumerate(_list(value, path))]

    return read_all


def _recent(value: Any, path: str) -> list[str]:
    items = _each(_str)(value, path)
    if len(items) > 2:
        raise _expect(path, "at most two fingerprints", value)
    return items


_READERS: dict[str, Callable[[Any, str], Any]] = {
    "messages": _messages,
    "observations": _each(_observation),
    "prompt_token_log": _each(_int),
    "turns": _int,
    "tool_attempts": _int,
    "machine_state": _machine_state,
    "path": _each(_machine_state),
    "pending": _each(_call),
    "judgement": _judgement,
    "denials": _denials,
    "answer": _opt_str,
    "opening": _int,
    "fault": _fault,
    "message_tokens": _int,
    "usage_offset": lambda value, path: _int(value, path, None),
    "limits": _limits,
    "pause": _pause,
    "run_id": _str,
    "consumed": _bool,
    "recent_rejections": _recent,
    "alternation": _int,
}
_FIELDS = attrs.fields(RunState)
_TOP = ("format", *(f.name for f in _FIELDS))


def _read(data: Any) -> RunState:
    _object(data, "", _TOP)
    values: dict[str, Any] = {}
    for field in _FIELDS:
        read = _READERS.get(field.name)
        value = data[field.name]
        values[field.name] = read(value, field.name) if read is not None else _generic(field, value, field.name)
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
    from agent_fsm.engine.approval import call_fingerprint

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


def _state_data(state: RunState) -> dict[str, Any]:
    data: dict[str, Any] = {"format": FORMAT}
    for field in _FIELDS:
        value = getattr(state, field.name)
        if field.name in ("observations", "pending"):
            value = [
                {name: getattr(item, name) for name in (_OBSERVATION if field.name == "observations" else _CALL)}
                for item in value
            ]
        elif attrs.has(type(value)):
            value = attrs.asdict(value)
        data[field.name] = value
    return data


def dump_state(state: RunState, key: bytes | None) -> str:
    """``state`` as strict JSON, signed when ``key`` is given (see :meth:`RunState.to_json`)."""
    try:
        text = json.dumps(_state_data(state), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"the run state cannot be saved as strict JSON: {exc}") from exc
    if key is None:
        return text
    return f'{{"signature":"{_sign(_key(key), text)}","state":{text}}}'


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a strict saved state holds no NaN or Infinity)")


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
        data = json.loads(text, parse_constant=_no_constant)
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
