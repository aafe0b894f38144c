"""
The kinds of saved fields: how a value of each kind is written, checked strictly and taken by the fast reader.

A record declares each field's kind beside the field (``attrs.field(metadata=codec(COUNT))``); the saved
form (:mod:`agent_fsm.engine._saved`) reads those declarations. A saved state is data that may have been
edited, truncated or forged: a strict rule reads a value without coercion and names the first problem by
its dotted path (:class:`BadField`); a fast rule takes a value as this engine writes it, or declines
(:class:`Decline`) and leaves the wording to the strict one. Kinds that build a record of a class above
this module (a pause, a verdict, a fault, a screen's record) are made from the class handed in
(:func:`pause`, ...), so nothing here imports the record. Sections: declarations, strict rules, fast
rules, writers, the kinds.
"""

from __future__ import annotations

import functools
import math
import operator
import re
import types
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import attrs

from agent_fsm.engine._context import read_compactions, read_prompt, write_compactions, write_prompt
from agent_fsm.engine._endings import CODE_PATTERN
from agent_fsm.engine._json import DEPTH_CEILING, argument_problem
from agent_fsm.engine._limits import Limits, Usage
from agent_fsm.engine._machine import RUN_MACHINE
from agent_fsm.engine._messages import Observation, content_problem
from agent_fsm.engine._tools import ToolCall

__all__ = [
    "BadField",
    "Codec",
    "Decline",
    "ENABLED",
    "FORMAT",
    "NESTING_CEILING",
    "NO_LEGACY",
    "STATES",
    "codec",
    "expect",
    "fault",
    "json_kind",
    "judgement",
    "nesting_problem",
    "pause",
    "read_limits",
    "read_object",
    "screens",
    "shape",
]

FORMAT = 2
"""Version of the saved-state format; bumped on any incompatible change."""

STATES = frozenset(s.name for s in RUN_MACHINE.states)
"""The names of the run machine's states: nothing else is a machine state."""

NESTING_CEILING = 8
"""How deep saved runs may nest in one another (an agent in an agent in ...): deeper is refused as malformed."""


# --- declarations ---

Reader = Callable[[Any, str], Any]
Quick = Callable[[Any, dict[str, Any]], Any]


NO_LEGACY: Any = object()
"""A field with no legacy value: it is always written."""


@attrs.frozen
class Codec:
    """
    How one field is saved and checked: the declaration a record puts beside the field (see :func:`codec`).

    ``read`` is the strict rule (value, dotted path) -> value, raising :class:`BadField`; ``write`` turns the
    value into JSON data (``None``: it is JSON as it stands); ``quick`` is the fast reader's take: a scalar
    kind (``"count"``, ``"whole"``, ``"flag"``, ``"text"``, ``"maybe"``, checked in groups) or a rule
    (value, the whole parsed state) -> value that raises to decline, not called on a value of type ``empty``
    that is empty (``None``, ``[]``, ``{}``, ``0.0``: taken as it stands); ``added``: the field was added to the
    format after it was first written, so a state saved before it loads with its default; ``grows``: a list the
    engine only appends to (at most its last item taken back or replaced before it is committed again), which a
    store writes as what each commit added, apart from the rest; ``rests``: how a paused state holds it at rest
    (``"packed"``, or ``"vacant"`` while empty); ``builds``: the frozen record classes its value holds, whose
    text cannot change while they are the same objects; ``nested``: states of the record's own class, by key.
    """

    read: Reader
    write: Callable[[Any], Any] | None = None
    quick: str | Quick = "none"
    added: bool = False
    grows: bool = False
    rests: str | None = None
    builds: tuple[type, ...] = ()
    nested: bool = False
    empty: type | None = None
    legacy: Any = NO_LEGACY


def codec(
    kind: Codec, *, added: bool = False, grows: bool = False, rests: str | None = None, legacy: Any = NO_LEGACY
) -> dict[str, Codec]:
    """
    The metadata of a saved field of ``kind`` (``attrs.field(metadata=codec(COUNT))``).

    ``added``: the field came after format 2 was first written, so a state saved before it may lack it (and
    reads with the field's default, or ``legacy``); ``legacy``: the value such a state holds, which is saved
    by leaving the field out, so that state is written again as it was; ``grows`` and ``rests``: see :class:`Codec`.
    """
    if added or grows or rests is not None or legacy is not NO_LEGACY:
        kind = attrs.evolve(kind, added=added or kind.added, grows=grows, rests=rests or kind.rests, legacy=legacy)
    return {"saved": kind}


class Decline(Exception):
    """The fast reader declines: the strict one reads the state and words the problem."""


# --- strict rules ---

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
    """The JSON name of a parsed value's kind (``null``, ``boolean``, ``number``, ``string``, ``array``, ``object``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def expect(path: str, expected: str, value: Any) -> BadField:
    return BadField(path, f"expected {expected}, got {_show(value)}")


def _str(value: Any, path: str) -> str:
    if type(value) is not str:
        raise expect(path, "a string", value)
    return value


def _opt_str(value: Any, path: str) -> str | None:
    return None if value is None else _str(value, path)


def _bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise expect(path, "true or false", value)
    return value


def _int(value: Any, path: str, minimum: int | None = 0) -> int:
    if type(value) is not int:
        raise expect(path, "a whole number", value)
    if minimum is not None and value < minimum:
        raise expect(path, f"a whole number >= {minimum}", value)
    return value


def _list(value: Any, path: str) -> list[Any]:
    if type(value) is not list:
        raise expect(path, "an array", value)
    return value


Shape = tuple[tuple[str, ...], frozenset[str]]


def shape(names: tuple[str, ...]) -> Shape:
    return names, frozenset(names)


def read_object(value: Any, path: str, shape: Shape, optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    if type(value) is not dict:
        raise expect(path, "an object", value)
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


_OBSERVATION_SHAPE = shape(_names(Observation))
_MEDIA = frozenset({"media"})
_CALL_SHAPE = shape(_names(ToolCall))
_LIMITS_SHAPE = shape(_names(Limits))
_USAGE_SHAPE = shape(_names(Usage))


# The records below are read once per saved call: their checks are written out,
# and a field's dotted path is only spelled when it is reported.


def _observation(value: Any, path: str) -> Observation:
    data = read_object(value, path, _OBSERVATION_SHAPE, _MEDIA)  # written only when a result held media
    kind = data["kind"]
    if kind not in _KINDS:
        raise expect(f"{path}.kind", f"one of {', '.join(_KINDS)}", kind)
    ok = data["ok"]
    if type(ok) is not bool:
        raise expect(f"{path}.ok", "true or false", ok)
    if ok != (kind == "result"):
        raise BadField(f"{path}.ok", f"{ok} disagrees with kind {kind!r} (only a result is ok)")
    call_id = data["call_id"]
    if type(call_id) is not str:
        raise expect(f"{path}.call_id", "a string", call_id)
    permanent = data["permanent"]
    if type(permanent) is not bool:
        raise expect(f"{path}.permanent", "true or false", permanent)
    text_form = data["text_form"]
    if type(text_form) is not bool:
        raise expect(f"{path}.text_form", "true or false", text_form)
    media: tuple[dict[str, Any], ...] = ()
    if "media" in data:
        found = data["media"]
        if type(found) is not list or not found or content_problem(found) or any(p["type"] == "text" for p in found):
            raise expect(f"{path}.media", "a non-empty array of image and file parts", found)
        media = tuple(found)
    return Observation(call_id, ok, kind, data["content"], permanent=permanent, text_form=text_form, media=media)


def _call(value: Any, path: str) -> ToolCall:
    data = read_object(value, path, _CALL_SHAPE)
    arguments = data["arguments"]
    if arguments is not None and type(arguments) is not dict:
        raise expect(f"{path}.arguments", "an object or null", arguments)
    call_id, name, raw = data["call_id"], data["name"], data["raw_arguments"]
    if type(call_id) is not str:
        raise expect(f"{path}.call_id", "a string", call_id)
    if type(name) is not str:
        raise expect(f"{path}.name", "a string", name)
    if raw is not None and type(raw) is not str:
        raise expect(f"{path}.raw_arguments", "a string", raw)
    original = data["original_id"]
    if original is not None and type(original) is not str:
        raise expect(f"{path}.original_id", "a string or null", original)
    return ToolCall(call_id, name, arguments, raw, original_id=original)


def _messages(value: Any, path: str) -> list[dict[str, Any]]:
    for index, message in enumerate(_list(value, path)):
        if type(message) is not dict:
            raise expect(f"{path}.{index}", "a message object", message)
        if type(message.get("role")) is not str:
            raise expect(f"{path}.{index}.role", "a string", message.get("role"))
        problem = content_problem(message.get("content"))
        if problem is not None:  # a list of content is parts, exactly as _parts writes them
            raise BadField(f"{path}.{index}.content", problem)
    return value  # type: ignore[no-any-return]


def _machine_state(value: Any, path: str) -> str:
    if type(value) is not str or value not in STATES:  # a type first: a list is not even hashable
        raise expect(path, "a state of the run machine", value)
    return value


def _judgement(cls: type) -> Reader:
    fields = shape(_names(cls))

    def read(value: Any, path: str) -> Any:
        if value is None:
            return None
        data = read_object(value, path, fields)
        kind, reason = data["kind"], data["reason"]
        if kind not in _JUDGEMENTS:
            raise expect(f"{path}.kind", f"one of {', '.join(_JUDGEMENTS)}", kind)
        if type(reason) is not str:
            raise expect(f"{path}.reason", "a string", reason)
        return cls(kind, reason)

    return read


def _fault(cls: type) -> Reader:
    fields = shape(("type", "kind", "message", "status"))

    def read(value: Any, path: str) -> Any:
        if value is None:
            return None
        data = read_object(value, path, fields)
        status = data["status"]
        return cls(
            _str(data["type"], f"{path}.type"),
            _str(data["kind"], f"{path}.kind"),
            _str(data["message"], f"{path}.message"),
            None if status is None else _int(status, f"{path}.status"),
        )

    return read


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
    data = read_object(value, path, _LIMITS_SHAPE, _LIMITS_SHAPE[1])
    if data.get("max_cost") is not None:  # money is saved as decimal text, never a float
        data = {**data, "max_cost": _decimal(data["max_cost"], f"{path}.max_cost")}
    try:
        limits = Limits(**data)
    except (TypeError, ValueError) as exc:
        raise BadField(path, str(exc)) from None
    if len(_LIMITS_SEEN) >= 256:
        _LIMITS_SEEN.clear()
    _LIMITS_SEEN[key] = limits
    return limits


_LIMITS_SEEN: dict[tuple[Any, ...], Limits] = {}


_DECIMAL = re.compile(r"[0-9]{1,30}(\.[0-9]{1,80})?")


def _decimal(value: Any, path: str) -> Decimal:
    """An amount of money as saved: decimal text (digits, one optional point), never a float that rounds."""
    if type(value) is not str or _DECIMAL.fullmatch(value) is None:
        raise expect(path, 'an amount as decimal text such as "0.0125"', value)
    return Decimal(value)


def _usage(value: Any, path: str) -> Usage:
    data = read_object(value, path, _USAGE_SHAPE)
    return Usage(
        _int(data["input_tokens"], f"{path}.input_tokens"),
        _int(data["output_tokens"], f"{path}.output_tokens"),
        _int(data["cached_tokens"], f"{path}.cached_tokens"),
        _decimal(data["cost"], f"{path}.cost"),
    )


def _pause(cls: type) -> Reader:
    fields = shape(_names(cls))

    def read(value: Any, path: str) -> Any:
        if value is None:
            return None
        data = read_object(value, path, fields)
        for name in fields[0]:
            if type(data[name]) is not str:
                raise expect(f"{path}.{name}", "a string", data[name])
        return cls(data["pause_id"], data["fingerprint"], data["reason"])

    return read


def _counts(value: Any, path: str) -> dict[str, int]:
    if type(value) is not dict:
        raise expect(path, "an object", value)
    for key, count in value.items():
        _int(count, f"{path}.{key}", 1)
    return value


def _code(value: Any, path: str) -> str | None:
    if value is not None and (type(value) is not str or CODE_PATTERN.fullmatch(value) is None):
        raise expect(path, "null or an ending code (a lowercase identifier)", value)
    return value


def _ints(value: Any, path: str) -> list[int]:
    for index, item in enumerate(_list(value, path)):
        if type(item) is not int or item < 0:
            raise expect(f"{path}.{index}", "a whole number >= 0", item)
    return value  # type: ignore[no-any-return]


def _states(value: Any, path: str) -> list[str]:
    for index, item in enumerate(_list(value, path)):
        if type(item) is not str or item not in STATES:
            raise expect(f"{path}.{index}", "a state of the run machine", item)
    return value  # type: ignore[no-any-return]


def _recent(value: Any, path: str) -> list[str]:
    for index, item in enumerate(_list(value, path)):
        _str(item, f"{path}.{index}")
    if len(value) > 2:
        raise expect(path, "at most two fingerprints", value)
    return value  # type: ignore[no-any-return]


def _seconds(value: Any, path: str) -> float:
    if type(value) in (int, float) and 0 <= value < math.inf:
        return float(value)
    raise expect(path, "a number of seconds >= 0", value)


def _screens(cls: type) -> Reader:
    fields = shape(_names(cls))

    def read(value: Any, path: str) -> list[Any]:
        found = []
        for index, item in enumerate(_list(value, path)):
            where = f"{path}.{index}"
            data = read_object(item, where, fields)
            if data["stage"] not in ("input", "result"):
                raise expect(f"{where}.stage", "input or result", data["stage"])
            if data["action"] not in ("pass", "redact", "stop"):
                raise expect(f"{where}.action", "pass, redact or stop", data["action"])
            call_id = _opt_str(data["call_id"], f"{where}.call_id")
            if (call_id is None) != (data["stage"] == "input"):
                raise expect(f"{where}.call_id", "a call id for a result's screen, null for the input's", call_id)
            code = _code(data["code"], f"{where}.code")
            found.append(cls(data["stage"], call_id, data["action"], code, _str(data["reason"], f"{where}.reason")))
        return found

    return read


def _json_value(value: Any, path: str) -> Any:  # typed output: plain JSON data, nested no deeper than a state may
    problem = argument_problem(value, max_depth=DEPTH_CEILING)
    if problem is not None:
        raise BadField(path, problem)
    return value


def _observations(value: Any, path: str) -> list[Observation]:
    return [_observation(o, f"{path}.{i}") for i, o in enumerate(_list(value, path))]


def _pending(value: Any, path: str) -> list[ToolCall]:
    return [_call(c, f"{path}.{i}") for i, c in enumerate(_list(value, path))]


def _relayed(reader: Callable[[Any, str], Any]) -> Reader:
    """A reader of another module, its ``ValueError(path, detail)`` as a :class:`BadField`."""

    def read(value: Any, path: str) -> Any:
        try:
            return reader(value, path)
        except ValueError as exc:
            raise BadField(*exc.args) from None

    return read


def nesting_problem(value: dict[str, Any], path: str) -> None:
    """Counted before any nested state is read: both readers recurse per level."""
    levels, level = path.split(".").count("children") - 1, [value] if value else []
    while level and levels <= NESTING_CEILING:
        levels += 1
        nested = (data.get("children") for children in level for data in children.values() if type(data) is dict)
        level = [children for children in nested if type(children) is dict and children]
    if levels > NESTING_CEILING:
        raise BadField(path, f"runs nest deeper than {NESTING_CEILING} levels")


# --- fast rules ---

# Field names and the attrs validators the fast reader repeats for the records it builds slot by slot (the
# records of a list, read by the hundred); every other record is built by its class, validators and all.
_RECORDS: dict[type, tuple[tuple[str, ...], dict[str, Any]]] = {
    Observation: (
        ("call_id", "ok", "kind", "content", "permanent", "text_form", "media"),
        {"kind": attrs.validators.in_(_KINDS)},
    ),
    ToolCall: (("call_id", "name", "arguments", "raw_arguments", "original_id"), {}),
}


def _plain(cls: type, names: tuple[str, ...], checked: dict[str, Any]) -> bool:
    """Whether ``cls`` is exactly the record a fast rule builds: slots, these fields, these validators only."""
    fields = attrs.fields(cls)
    if tuple(f.name for f in fields) != names or hasattr(cls, "__attrs_post_init__"):
        return False
    if hasattr(cls, "__attrs_pre_init__"):
        return False
    for f in fields:
        if f.converter is not None or not isinstance(getattr(cls, f.name, None), types.MemberDescriptorType):
            return False
        if f.validator is not None and repr(f.validator) != repr(checked.get(f.name)):
            return False
    return True


ENABLED = all(_plain(cls, *_RECORDS[cls]) for cls in _RECORDS)
"""Whether the fast path is on (the record classes are as this module expects); else the fast reader declines."""


def _setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    slot: Any = getattr(cls, name, None)
    if not isinstance(slot, types.MemberDescriptorType):  # the class has changed: never called, ENABLED is off
        return _unused
    return slot.__set__


def _unused(record: Any, value: Any) -> None:
    raise AssertionError("the fast reader is off: its record classes are not the ones it was written for")


_new = object.__new__
_obs_call_id, _obs_ok, _obs_kind, _obs_content, _obs_permanent, _obs_text_form, _obs_media = (
    _setter(Observation, n) for n in _RECORDS[Observation][0]
)
_call_id, _call_name, _call_arguments, _call_raw, _call_original = (_setter(ToolCall, n) for n in _RECORDS[ToolCall][0])

# One shared string per name: a loaded state holds the same objects a run
# holds, not a fresh copy of "AwaitingApproval" for every step of its path
# (found by the lookup that checks the name anyway).
_STATE_NAMES = {name: name for name in STATES}
_state_name = _STATE_NAMES.__getitem__
_KIND_NAMES = {name: name for name in _KINDS}


def _quick_messages(messages: Any, data: dict[str, Any]) -> Any:
    if type(messages) is not list:
        raise Decline
    for message in messages:  # kept as parsed: sharing the role names would cost more time than it saves
        if type(message) is not dict or type(message.get("role")) is not str:
            raise Decline
        if type(message.get("content")) is list and content_problem(message["content"]) is not None:
            raise Decline  # the strict reader names the problem
    return messages


def _quick_observations(items: Any, data: dict[str, Any]) -> list[Observation]:
    if type(items) is not list:
        raise Decline
    observations = []
    for item in items:
        if type(item) is not dict or len(item) != 6:
            raise Decline  # an observation with media (seven fields) is read by the strict reader
        kind, ok, call_id, content, permanent, text_form = (
            item["kind"], item["ok"], item["call_id"], item["content"], item["permanent"], item["text_form"]
        )  # fmt: skip
        if type(kind) is not str or type(ok) is not bool or ok != (kind == "result") or type(call_id) is not str:
            raise Decline
        if type(permanent) is not bool or type(text_form) is not bool:
            raise Decline
        o = _new(Observation)
        _obs_call_id(o, call_id)
        _obs_ok(o, ok)
        _obs_kind(o, _KIND_NAMES[kind])  # not a kind: KeyError
        _obs_content(o, content)
        _obs_permanent(o, permanent)
        _obs_text_form(o, text_form)
        _obs_media(o, ())
        observations.append(o)
    return observations


def _quick_pending(items: Any, data: dict[str, Any]) -> list[ToolCall]:
    if type(items) is not list:
        raise Decline
    pending = []
    for item in items:
        if type(item) is not dict or len(item) != 5:
            raise Decline
        call_id, name, arguments, raw, original = (
            item["call_id"], item["name"], item["arguments"], item["raw_arguments"], item["original_id"]
        )  # fmt: skip
        if type(call_id) is not str or type(name) is not str or (arguments is not None and type(arguments) is not dict):
            raise Decline
        if (raw is not None and type(raw) is not str) or (original is not None and type(original) is not str):
            raise Decline
        c = _new(ToolCall)
        _call_id(c, call_id)
        _call_name(c, name)
        _call_arguments(c, arguments)
        _call_raw(c, raw)
        _call_original(c, original)
        pending.append(c)
    return pending


def _quick_sizes(log: Any, data: dict[str, Any]) -> Any:
    if type(log) is not list:
        raise Decline
    for n in log:
        if type(n) is not int or n < 0:
            raise Decline
    return log


def _quick_path(path: Any, data: dict[str, Any]) -> list[str]:
    if type(path) is not list:
        raise Decline
    return list(map(_state_name, path))


def _quick_machine_state(value: Any, data: dict[str, Any]) -> str:
    return _state_name(value)  # an unknown state: KeyError


def _quick_counts(counts: Any, data: dict[str, Any]) -> Any:
    if type(counts) is not dict:
        raise Decline
    for n in counts.values():
        if type(n) is not int or n < 1:
            raise Decline
    return counts


def _quick_recent(recent: Any, data: dict[str, Any]) -> Any:
    if type(recent) is not list or len(recent) > 2:
        raise Decline
    for r in recent:
        if type(r) is not str:
            raise Decline
    return recent


def _quick_code(code: Any, data: dict[str, Any]) -> Any:
    if code is not None and (type(code) is not str or CODE_PATTERN.fullmatch(code) is None):
        raise Decline
    return code


def _quick_seconds(elapsed: Any, data: dict[str, Any]) -> float:
    if (type(elapsed) is not float and type(elapsed) is not int) or not 0 <= elapsed < math.inf:
        raise Decline
    return float(elapsed)


def _quick_output(output: Any, data: dict[str, Any]) -> Any:
    if output is not None and argument_problem(output, max_depth=DEPTH_CEILING) is not None:
        raise Decline
    return output


def _maker(cls: type, names: tuple[str, ...], checked: dict[str, Any]) -> Callable[..., Any]:
    """
    A maker of ``cls`` records from their fields in order: slot by slot, written out, when ``cls`` is plain (the
    fast rule has checked what its validators would); else its class.
    """
    if not _plain(cls, names, checked):
        return cls
    scope: dict[str, Any] = {"new": _new, "cls": cls, **{f"s{i}": _setter(cls, n) for i, n in enumerate(names)}}
    values = ", ".join(f"v{i}" for i in range(len(names)))
    puts = "".join(f"    s{i}(r, v{i})\n" for i in range(len(names)))
    exec(f"def make({values}):\n    r = new(cls)\n{puts}    return r\n", scope)  # made from the names alone
    return scope["make"]  # type: ignore[no-any-return]


def _quick_pause(cls: type) -> Quick:
    make = _maker(cls, ("pause_id", "fingerprint", "reason"), {})

    def read(found: Any, data: dict[str, Any]) -> Any:
        if found is None:
            return None
        if type(found) is not dict or len(found) != 3:
            raise Decline
        fingerprint, reason, given_id = found["fingerprint"], found["reason"], found["pause_id"]
        if type(given_id) is not str or type(fingerprint) is not str or type(reason) is not str:
            raise Decline
        if given_id == data["pause_id"]:
            given_id = data["pause_id"]  # one string for the state's and the pause's id, as a run holds it
        return make(given_id, fingerprint, reason)

    return read


def _quick_judgement(cls: type) -> Quick:
    make = _maker(cls, ("kind", "reason"), {"kind": attrs.validators.in_(_JUDGEMENTS)})

    def read(found: Any, data: dict[str, Any]) -> Any:
        if found is None:
            return None
        if type(found) is not dict or len(found) != 2:
            raise Decline
        kind, reason = found["kind"], found["reason"]
        if type(reason) is not str or kind not in _JUDGEMENTS:
            raise Decline
        pause = data["pause"]
        if type(pause) is dict and reason == pause.get("reason"):
            reason = pause["reason"]  # the gate's reason, held once (the pause is built from the same string)
        return make(kind, reason)

    return read


def _quick_by_rule(rule: Reader) -> Quick:
    """A rare or short value, read by the strict rule (its problem, if any, worded by the strict reader later)."""

    def read(value: Any, data: dict[str, Any]) -> Any:
        try:
            return rule(value, "")
        except BadField:
            raise Decline from None

    return read


def _by_form(value: Any, path: str) -> Any:  # never called: the form reads the states nested in its own
    raise AssertionError("nested states are read by their form")


def _quick_usage(value: Any, data: dict[str, Any]) -> Usage:
    if type(value) is not dict or len(value) != 4:
        raise Decline
    inputs, outputs, cached, cost = value["input_tokens"], value["output_tokens"], value["cached_tokens"], value["cost"]
    if (
        type(inputs) is not int
        or type(outputs) is not int
        or type(cached) is not int
        or min(inputs, outputs, cached) < 0
    ):
        raise Decline
    if cost == "0":  # a run with no prices: one shared zero (a Decimal is immutable)
        return Usage(inputs, outputs, cached, _NO_COST)
    if type(cost) is not str or _DECIMAL.fullmatch(cost) is None:
        raise Decline
    return Usage(inputs, outputs, cached, Decimal(cost))


_NO_COST = Decimal(0)


# --- writers ---


# The writer, derived from the declarations: each record is read in one C call
# (operator.attrgetter over its attrs fields) and zipped with its field names.
def _writer(cls: type) -> Callable[[Any], dict[str, Any]]:
    names = tuple(f.name for f in attrs.fields(cls))
    values = operator.attrgetter(*names)
    return lambda record: dict(zip(names, values(record), strict=True))


def _optional(write: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda record: None if record is None else write(record)


_observation_fields = _writer(Observation)


def _observation_data(observation: Observation) -> dict[str, Any]:
    data = _observation_fields(observation)
    if data["media"]:
        data["media"] = list(data["media"])
    else:  # none: written as before media existed, so older texts are written again alike
        del data["media"]
    return data


_call_data = _writer(ToolCall)
_usage_fields = _writer(Usage)
_limits_fields = _writer(Limits)


def _with_amount(data: dict[str, Any], name: str) -> dict[str, Any]:
    if data[name] is not None:  # money as fixed-point text: never a float, never "1E-7" (which the reader refuses)
        data[name] = format(data[name], "f")
    return data


def _limits_data(limits: Limits) -> dict[str, Any]:
    data = _with_amount(_limits_fields(limits), "max_cost")
    if data["repeated_results"] is None:  # off: written as before it existed, so older texts are written again alike
        del data["repeated_results"]
    if data["wrap_up"] is False:
        del data["wrap_up"]
    return data


# --- the kinds a record declares its fields with ---

COUNT = Codec(_int, quick="count")
"""A whole number >= 0."""
WHOLE = Codec(functools.partial(_int, minimum=None), quick="whole")
"""A whole number, negative too."""
FLAG = Codec(_bool, quick="flag")
TEXT = Codec(_str, quick="text")
MAYBE_TEXT = Codec(_opt_str, quick="maybe")
"""A string or null."""
CODE = Codec(_code, quick=_quick_code, empty=type(None))
"""Null or an ending code (a lowercase identifier)."""
SECONDS = Codec(_seconds, quick=_quick_seconds, empty=float)
MESSAGES = Codec(_messages, quick=_quick_messages, empty=list)
"""The transcript: message objects, each with a string role."""
OBSERVATIONS = Codec(
    _observations, lambda items: [_observation_data(o) for o in items], _quick_observations, empty=list
)
SIZES = Codec(_ints, quick=_quick_sizes, empty=list)
"""A list of whole numbers >= 0."""
MACHINE_STATE = Codec(_machine_state, quick=_quick_machine_state)
PATH = Codec(_states, quick=_quick_path, empty=list)
"""A list of the run machine's state names."""
PENDING = Codec(_pending, lambda items: [_call_data(c) for c in items], _quick_pending, empty=list)
COUNTS_BY_NAME = Codec(_counts, quick=_quick_counts, empty=dict)
"""An object of whole numbers >= 1 by name."""
RECENT = Codec(_recent, quick=_quick_recent, empty=list)
"""At most two fingerprints."""
LIMITS = Codec(
    read_limits,
    lambda limits: None if limits is None else _limits_data(limits),
    _quick_by_rule(read_limits),
    empty=type(None),
    builds=(Limits,),
)
PROMPT = Codec(_relayed(read_prompt), write_prompt, _quick_by_rule(_relayed(read_prompt)), empty=type(None))
COMPACTIONS = Codec(
    _relayed(read_compactions), write_compactions, _quick_by_rule(_relayed(read_compactions)), empty=list
)
JSON_VALUE = Codec(_json_value, quick=_quick_output, empty=type(None))
"""Plain JSON data, nested no deeper than a state may."""
USAGE = Codec(_usage, lambda usage: _with_amount(_usage_fields(usage), "cost"), _quick_usage)
NESTED = Codec(_by_form, empty=dict, nested=True)
"""Whole states of the record's own class, by key (read and written by the form itself)."""


def judgement(cls: type) -> Codec:
    """A verdict record of ``cls`` (``kind``, ``reason``) or null."""
    return Codec(_judgement(cls), _optional(_writer(cls)), _quick_judgement(cls), empty=type(None), builds=(cls,))


def fault(cls: type) -> Codec:
    """A provider fault record of ``cls`` (``type``, ``kind``, ``message``, ``status``) or null."""
    read = _fault(cls)
    return Codec(read, _optional(_writer(cls)), _quick_by_rule(read), empty=type(None), builds=(cls,))


def pause(cls: type) -> Codec:
    """A pause record of ``cls`` (``pause_id``, ``fingerprint``, ``reason``: strings) or null."""
    return Codec(_pause(cls), _optional(_writer(cls)), _quick_pause(cls), empty=type(None), builds=(cls,))


def screens(cls: type) -> Codec:
    """A list of screen verdict records of ``cls``."""
    read, write = _screens(cls), _writer(cls)
    return Codec(read, lambda items: [write(r) for r in items], _quick_by_rule(read), empty=list, builds=(cls,))
