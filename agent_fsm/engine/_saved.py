"""
The saved form of a record: its writer, its strict and fast readers and its signature, derived from its fields.

Each field of the run's state declares beside itself how it is saved and checked: ``attrs.field(metadata=...)``
holding a :class:`~agent_fsm.engine._codecs.Codec` (its kind's strict rule, writer and fast rule, whether it
was added to the format later, whether it rests compact). A :class:`SavedForm` reads those declarations at run
time through ``attrs.fields(cls)``: this module sits below the record in the kernel's layers and never imports
it. The record's module builds one form over its class at import and its ``to_json`` / ``from_json`` delegate
to it, an import downwards (the layering allows no import from here back up, not even inside a function). No
list of field names is written twice: the writer, both readers and the writer of a state committed again and
again each derive from the one declaration per field; the fast reader and the writer are compiled at import
into one function each (see the banner of their section). Sections: the form, the fast reader and the writer,
compiled, the writer of a state committed again and again, signature.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import re
from collections.abc import Callable
from typing import Any

import attrs

from agent_fsm.engine._codecs import (
    ENABLED,
    FORMAT,
    NO_LEGACY,
    BadField,
    Codec,
    Decline,
    expect,
    json_kind,
    nesting_problem,
    read_object,
    shape,
)
from agent_fsm.engine._context import Compaction
from agent_fsm.engine._limits import Usage

__all__ = ["FieldWriter", "SavedForm"]

# --- the form ---


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a strict saved state holds no NaN or Infinity)")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_scan: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
_ENCODER = json.JSONEncoder(allow_nan=False)


class SavedForm:
    """
    The saved form of one record class, derived from its fields' declarations (:class:`Codec` in their metadata).

    ``fields`` are written in the class's order after ``format``; ``added`` are those a state saved before
    them may lack. ``check`` is the record's own consistency check, run on every state read
    (``(dotted path, problem)`` or ``None``). ``typical`` makes a state as a run starts, the first thing
    a :class:`FieldWriter` has written.
    """

    def __init__(self, cls: type, check: Callable[[Any], tuple[str, str] | None], typical: Callable[[], Any]) -> None:
        fields = attrs.fields(cls)
        bare = [f.name for f in fields if not isinstance(f.metadata.get("saved"), Codec)]
        if bare:  # a field added without saying how it is saved fails at import, not at the first save
            raise RuntimeError(f"fields of {cls.__name__} without a saved form (metadata=codec(...)): {bare}")
        codecs: dict[str, Codec] = {f.name: f.metadata["saved"] for f in fields}
        self.cls, self.check, self.typical = cls, check, typical
        self.codecs = codecs
        self.fields: tuple[str, ...] = tuple(codecs)
        self.added = frozenset(name for name, c in codecs.items() if c.added)
        self._top = shape(("format", *self.fields))
        # Fields saved by leaving them out while they hold the value of a state saved before them.
        self._legacy = tuple((name, c.legacy) for name, c in codecs.items() if c.legacy is not NO_LEGACY)
        self._rules = tuple((name, self._nested_read if c.nested else c.read) for name, c in codecs.items())
        self._converted: tuple[tuple[int, Callable[[Any], Any]], ...] = tuple(
            (i + 1, self._nested_data if c.nested or c.write is None else c.write)
            for i, c in enumerate(codecs.values())
            if c.nested or c.write is not None
        )
        self.data: Callable[[Any], dict[str, Any]] = _compiled_writer(self, fields)
        self.quick: Callable[[dict[str, Any]], Any] = _compiled_reader(self, fields) if ENABLED else _declined
        self.immutable = frozenset(
            {int, str, float, bool, type(None), Compaction, *(t for c in codecs.values() for t in c.builds)}
        )

    # -- writing --

    def _nested_data(self, children: dict[str, Any]) -> dict[str, Any]:
        return {key: self.data(child) for key, child in children.items()}

    def dump(self, state: Any, key: bytes | None) -> str:
        """``state`` as strict JSON, signed when ``key`` is given (see ``RunState.to_json``)."""
        try:
            text = _ENCODER.encode(self.data(state))
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"the run state cannot be saved as strict JSON: {exc}") from exc
        if key is None:
            return text
        return f'{{"signature":"{_sign(_key(key), text)}","state":{text}}}'

    # -- reading --

    def load(self, text: Any, key: bytes | None) -> Any:
        """Read and check a saved state (see ``RunState.from_json``)."""
        if type(text) is not str:
            if not isinstance(text, (str, bytes, bytearray)):
                raise ValueError(f"a saved run state is JSON text; got {type(text).__name__}")
            if isinstance(text, (bytes, bytearray)):
                text = text.decode("utf-8", errors="replace")
        if key is not None:
            text = _verified(text, key)
        try:
            data, end = _scan(text, 0)  # the whole text one JSON value, as to_json writes it
        except (StopIteration, ValueError, RecursionError):
            end = -1
        if end != len(text):  # anything else (space around it, not JSON): the decoder decides and words it
            try:
                data = _DECODER.decode(text)
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"saved run state is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"not a saved agent_fsm run state: expected a JSON object, got a JSON {json_kind(data)}")
        if "signature" in data and "format" not in data:
            raise ValueError("this saved run state is signed: read it with RunState.from_json(text, key=...)")
        found_format = data.get("format")
        if found_format != FORMAT or type(found_format) is not int:
            raise ValueError(f"not a saved agent_fsm run state (format {FORMAT} expected, got {found_format!r})")
        state = self.quick(data)  # a state as this engine writes it: checked in one pass
        if state is None:  # anything else: the strict reader names the first problem
            try:
                state = self.read(data)
            except BadField as bad:
                raise ValueError(f"saved run state is malformed at {bad.path}: {bad.detail}") from None
        problem = self.check(state)
        if problem is not None:
            raise ValueError(f"saved run state is inconsistent at {problem[0]}: {problem[1]}")
        return state

    def read(self, data: dict[str, Any]) -> Any:
        """``data`` (a parsed saved state) as a state, or :class:`BadField` naming the first problem."""
        read_object(data, "", self._top, self.added)
        values = {name: rule(data[name], name) for name, rule in self._rules if name in data}
        for name, legacy in self._legacy:
            values.setdefault(name, legacy)
        return self.cls(**values)

    def _nested(self, value: Any, path: str, quick: bool) -> dict[str, Any]:
        if type(value) is not dict:
            raise expect(path, "an object of nested runs by call id", value)
        nesting_problem(value, path)
        children = {}
        for key, data in value.items():
            where = f"{path}.{key}"
            if type(data) is not dict or data.get("format") != FORMAT or type(data.get("format")) is not int:
                raise expect(where, f"a saved run state of format {FORMAT}", data)
            child = self.quick(data)
            if child is None:
                if quick:
                    raise Decline
                try:
                    child = self.read(data)
                except BadField as bad:
                    raise BadField(f"{where}.{bad.path}", bad.detail) from None
            children[key] = child
        return children

    def _nested_read(self, value: Any, path: str) -> dict[str, Any]:
        return self._nested(value, path, quick=False)

    def _nested_quick(self, value: Any, data: dict[str, Any]) -> dict[str, Any]:
        if type(value) is dict and not value:
            return value
        try:
            return self._nested(value, "children", quick=True)
        except BadField:
            raise Decline from None

    def covers(self, sample: Any) -> bool:
        """Whether the fast reader reads ``sample`` back equal (checked at import on a state using every field)."""
        data = json.loads(self.dump(sample, None))
        return bool(self.quick(data) == sample)


# --- the fast reader and the writer, compiled ---

# Each is written out at import as one Python function over the form's fields (as attrs writes a class's
# __init__ from its fields): a loop over the fields, with a call or a lookup per field, costs more than the
# checks themselves. The source holds the fields' names and their kinds' checks; every rule it calls is bound
# by name. A scalar kind is checked in the function's body; a compound value is handed to its kind's rule,
# unless it is an empty value of its field's type (taken as it stands, or written as it stands).

# The fast reader's check of each scalar kind: the condition under which it declines the value ``{v}``.
_DECLINED = {
    "count": "type({v}) is not int or {v} < 0",
    "whole": "type({v}) is not int",
    "flag": "type({v}) is not bool",
    "text": "type({v}) is not str",
    "maybe": "{v} is not None and type({v}) is not str",
}
_ABSENT: Any = object()  # a field missing from a state saved before it was added


def _declined(data: dict[str, Any]) -> None:
    """The fast reader while it is off (its record classes are not the ones it was written for): always declines."""
    return None


def _not_empty(c: Codec, v: str, i: int, names: dict[str, Any]) -> str:
    """The condition under which ``v`` is not an empty value of its field's type (which stands as it is)."""
    empty = dict if c.nested else c.empty
    if empty is None:
        return "True"
    if empty is type(None):
        return f"{v} is not None"
    names[f"e{i}"] = empty
    return f"{v} or type({v}) is not e{i}"


def _compiled(source: list[str], names: dict[str, Any], name: str) -> Any:
    exec(compile("\n".join(source), f"<saved form: {name}>", "exec"), names)  # source made from the declarations
    return names[name]


def _compiled_reader(form: SavedForm, fields: Any) -> Callable[[dict[str, Any]], Any]:
    """
    The form's fast reader: ``data`` (a freshly parsed saved state) as a state if it is plainly valid, else ``None``.

    "Plainly valid" is exactly what :meth:`SavedForm.read` accepts, and the state built is equal to the one it
    builds. The parsed data is owned by the state afterwards (its messages are kept, not copied), so the caller
    must have parsed it for this call alone.
    """
    names: dict[str, Any] = {"Decline": Decline, "ABSENT": _ABSENT, "new": form.cls}
    present = ["    data['format']"]  # its value is the caller's to check, but it must be there
    added = ["    get, absent = data.get, 0"]
    declined = [f"len(data) + absent != {len(fields) + 1}"]  # every field found or absent, none unknown
    rules = []
    for i, f in enumerate(fields):
        c: Codec = f.metadata["saved"]
        v = f"v{i}"
        if c.added:
            added.append(f"    {v} = get({f.name!r}, ABSENT)")
            added.append(f"    if {v} is ABSENT:")
            names[f"d{i}"], made = _default_of(f)
            added.append(f"        {v}, absent = d{i}{'()' if made else ''}, absent + 1")
        else:
            present.append(f"    {v} = data[{f.name!r}]")
        if isinstance(c.quick, str) and not c.nested:
            declined.append(_DECLINED[c.quick].format(v=v))  # an unknown kind: KeyError at import
            continue
        names[f"q{i}"] = form._nested_quick if c.nested else c.quick
        read = f"{v} = q{i}({v}, data)"
        if c.added:  # an absent field holds its default, not parsed data: no rule reads it
            added.append(f"    elif {_not_empty(c, v, i, names)}:")
            added.append(f"        {read}")
        else:
            rules.append(f"    if {_not_empty(c, v, i, names)}:")
            rules.append(f"        {read}")
    if _settable(form.cls, fields):  # built as its __init__ builds it, validators and all, without the call
        names["new"], built = object.__new__, ["    state = new(cls)"]
        names["cls"] = form.cls
        for i, f in enumerate(fields):
            built.append(f"    state.{f.name} = v{i}")
            if f.validator is not None:
                names[f"a{i}"], names[f"c{i}"] = f, f.validator
                built.append(f"    c{i}(state, a{i}, v{i})")
        built.append("    return state")
    else:
        built = ["    return new(" + ", ".join(f"v{i}" for i in range(len(fields))) + ")"]
    source = [
        "def quick(data):",
        "  try:",
        *present,
        *added,
        "    if " + " or ".join(f"({d})" for d in declined) + ":",
        "        return None",
        *rules,
        *built,
        # A record field missing, a name not even hashable, declined; refused by a validator: the strict reader's.
        "  except (KeyError, TypeError, ValueError, Decline):",
        "    return None",
    ]
    quick: Callable[[dict[str, Any]], Any] = _compiled(source, names, "quick")
    quick.__doc__ = _compiled_reader.__doc__
    return quick


def _compiled_writer(form: SavedForm, fields: Any) -> Callable[[Any], dict[str, Any]]:
    """The form's writer: a state as the plain JSON data :meth:`SavedForm.dump` writes."""
    names: dict[str, Any] = {"FORMAT": FORMAT}
    read, items, legacy = [], ["'format': FORMAT"], []
    for i, f in enumerate(fields):
        c: Codec = f.metadata["saved"]
        v = f"v{i}"
        read.append(f"    {v} = state.{f.name}")
        write = form._nested_data if c.nested else c.write
        if write is None:
            items.append(f"{f.name!r}: {v}")
        else:
            names[f"w{i}"] = write
            items.append(f"{f.name!r}: w{i}({v}) if {_not_empty(c, v, i, names)} else {v}")
            empty = names.get(f"e{i}", type(None) if c.empty is type(None) else None)
            if empty is not None and _encoded(write(empty())) != _encoded(empty()):
                raise RuntimeError(f"{f.name}: its writer changes an empty value, so it cannot stand as it is")
        if c.legacy is not NO_LEGACY:  # saved by leaving it out while it holds the value of a state saved before it
            names[f"l{i}"] = c.legacy
            legacy.append(f"    if {v} == l{i}:")
            legacy.append(f"        del data[{f.name!r}]")
    source = ["def data(state):", *read, "    data = {" + ", ".join(items) + "}", *legacy, "    return data"]
    data: Callable[[Any], dict[str, Any]] = _compiled(source, names, "data")
    data.__doc__ = _compiled_writer.__doc__
    return data


def _settable(cls: type, fields: Any) -> bool:
    """Whether setting the attributes of a bare record of ``cls`` is all its ``__init__`` does (validators aside)."""
    plain = cls.__setattr__ is object.__setattr__ and not hasattr(cls, "_attrs_cached_hash")  # type: ignore[comparison-overlap]
    hooks = hasattr(cls, "__attrs_pre_init__") or hasattr(cls, "__attrs_post_init__")
    return (
        plain
        and not hooks
        and not attrs.validators.get_disabled()
        and all(f.init and f.converter is None for f in fields)
    )


def _default_of(field: Any) -> tuple[Any, bool]:
    """
    What a state saved before ``field`` holds, and whether that is a factory to call: its legacy value, its
    factory, or its (immutable) default.
    """
    legacy = field.metadata["saved"].legacy
    if legacy is not NO_LEGACY:
        return legacy, False
    default = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return default.factory, True
    return default, False


# --- the writer of a state committed again and again ---

# One value encoded by a C encoder made once (JSONEncoder.encode makes one per call, which costs more
# than encoding a counter), with _ENCODER's settings: so a field's text is what dump writes of it.
# No circularity markers: a cycle ends in RecursionError, refused as any state strict JSON cannot hold.
_make_encoder = getattr(json.encoder, "c_make_encoder", None)
if _make_encoder is not None:
    _one_value = _make_encoder(
        None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, False
    )

    def _encoded(value: Any) -> str:
        return "".join(_one_value(value, 0))

else:  # pragma: no cover - an interpreter without the C accelerator

    def _encoded(value: Any) -> str:
        return _ENCODER.encode(value)


_usage_values = operator.attrgetter(*(f.name for f in attrs.fields(Usage)))


class _Copy:
    """What a mutable field held when written: a later value holding the very same objects is written the same."""

    __slots__ = ("items", "kind")

    def __init__(self, kind: type, items: tuple[Any, ...]) -> None:
        self.kind, self.items = kind, items

    def holds(self, value: Any) -> bool:
        kind: Any = self.kind
        items = self.items
        if type(value) is not kind:
            return False
        if not items:  # an empty list or mapping (most of them, at most commits): still empty?
            return not value
        if kind is Usage:
            return all(map(operator.is_, _usage_values(value), items))
        if kind is dict:
            return len(value) == len(items) // 2 and all(map(operator.is_, (*value, *value.values()), items))
        return len(value) == len(items) and all(map(operator.is_, value, items))


_UNTOLD = object()  # a value the writer cannot tell unchanged (it holds something mutable): written every time


class _Bare:
    """What a form's writers share: the fields written with a bare state, their places and keys, a new run's texts."""

    def __init__(self, form: SavedForm) -> None:
        grows = [name for name, c in form.codecs.items() if c.grows]
        self.fields = tuple(name for name in form.fields if name not in grows)
        self.values = operator.attrgetter(*self.fields)
        self.keys = tuple(f", {_ENCODER.encode(name)}: " for name in self.fields)
        writes = dict(form._converted)
        self.convert = tuple(writes.get(form.fields.index(name) + 1) for name in self.fields)
        self.indices = range(len(self.fields))
        # Where each field written with the state stands among all the fields: a growing list keeps its place, empty.
        self.slots = tuple(form.fields.index(name) for name in self.fields)
        self.empty = tuple(f", {_ENCODER.encode(name)}: []" if name in grows else "" for name in form.fields)
        self.legacy = tuple(form.codecs[name].legacy for name in self.fields)
        self.head = _ENCODER.encode({"format": FORMAT})[:-1]
        self.writes = tuple(form.codecs[name].write for name in grows)
        # The growing lists of a state, as a tuple whatever their number (one attrgetter call for several).
        self.lists: Callable[[Any], tuple[list[Any], ...]] = (
            operator.attrgetter(*grows) if len(grows) > 1 else lambda state: tuple(getattr(state, n) for n in grows)
        )
        self.immutable = form.immutable
        self.fresh: tuple[tuple[Any, ...], tuple[str, ...]] | None = None

    def kept(self, value: Any) -> Any:
        """What tells, at the next commit, that a field's value is the one just written."""
        kind = type(value)
        immutable = self.immutable
        if kind in immutable:
            return value
        if kind is Usage:
            return _Copy(kind, _usage_values(value))
        if kind is list and immutable.issuperset(map(type, value)):
            return _Copy(kind, tuple(value))
        if kind is dict and immutable.issuperset(map(type, value.values())) and all(type(k) is str for k in value):
            return _Copy(kind, (*value, *value.values()))
        return _UNTOLD


class FieldWriter:
    """
    One run's states, committed again and again, written without their growing lists: each field encoded when changed.

    A store commits a run's state at every checkpoint, and most of its
    fields are as they were at the commit before (the limits, the run's id,
    the agent and its digest, counters between turns). The writer keeps the
    text of each field as last written and encodes again only a field whose
    value differs: an immutable value that is another object, a list or
    mapping of immutable values whose items are not the very same objects,
    usage whose counts are not. A field that holds what may change in place
    (pending calls with their arguments, typed output, a compacted prompt,
    nested runs) is encoded every time. The text is exactly the form's
    ``dump`` of the same state with its growing lists (declared ``grows``:
    the transcript, observations, prompt sizes, path, screens, compactions)
    empty; :meth:`added` writes the items a commit adds to them, so what a
    commit encodes does not grow with the run.

    Keep one writer per run, used by one thread at a time.
    """

    __slots__ = ("_bare", "_seen", "_texts")
    _seen: list[Any]
    _texts: list[str]

    def __init__(self, form: SavedForm) -> None:
        self._bare = bare = _bare_of(form)
        fresh = bare.fresh
        if fresh is None:  # the fields of a new state as the engine makes it, written once per form
            self._seen, self._texts = [_UNTOLD] * len(bare.fields), list(bare.empty)
            self.bare(form.typical())
            fresh = bare.fresh = tuple(self._seen), tuple(self._texts)
        self._seen, self._texts = list(fresh[0]), list(fresh[1])

    def bare(self, state: Any) -> str:
        """
        ``state`` as strict JSON text with its growing lists empty.

        Raises:
            ValueError: the state holds something strict JSON cannot (as ``RunState.to_json``).
        """
        seen, texts, bare = self._seen, self._texts, self._bare
        values, immutable = bare.values(state), bare.immutable
        try:
            # The fields whose value is not the very object last written (found in C), then those of them changed.
            for i in itertools.compress(bare.indices, map(operator.is_not, values, seen)):
                value, kept = values[i], seen[i]
                if type(kept) is _Copy and (
                    (kept.kind is type(value) and not kept.items and not value) or kept.holds(value)
                ):  # the same values (an empty list or mapping, the most common, told without a call)
                    continue
                convert, legacy = bare.convert[i], bare.legacy[i]
                if legacy is not NO_LEGACY and value == legacy:
                    texts[bare.slots[i]] = ""  # saved by leaving it out, as dump does
                else:
                    texts[bare.slots[i]] = bare.keys[i] + _encoded(value if convert is None else convert(value))
                seen[i] = value if type(value) in immutable else bare.kept(value)  # most values: no call
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"the run state cannot be saved as strict JSON: {exc}") from exc
        return f"{bare.head}{''.join(texts)}}}"

    def added(self, state: Any, *since: int) -> tuple[str, ...]:
        """
        The JSON of the items of ``state``'s growing lists after the first ``since`` of each (in the class's order).

        Each list's items as ``RunState.to_json`` writes them, comma-joined
        (empty text: nothing added).

        Raises:
            ValueError: an item is not strict JSON (as ``RunState.to_json``).
        """
        bare = self._bare
        try:
            # A list that added nothing is neither sliced nor encoded (most lists, at most commits).
            found = []
            for items, start, write in zip(bare.lists(state), since, bare.writes, strict=True):
                if len(items) <= start:
                    found.append("")
                else:
                    found.append(_encoded(items[start:] if write is None else write(items[start:]))[1:-1])
            return tuple(found)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"the run state cannot be saved as strict JSON: {exc}") from exc


@functools.cache
def _bare_of(form: SavedForm) -> _Bare:
    return _Bare(form)


# --- signature ---

_SIGNED = re.compile(r'\{"signature":"([0-9a-f]{64})","state":')
_SIGNED_PREFIX = len('{"signature":"') + 64 + len('","state":')


def _key(key: Any) -> bytes:
    if not isinstance(key, bytes) or not key:
        raise TypeError(f"'key' must be non-empty bytes (got {type(key).__name__})")
    return key


def _sign(key: bytes, text: str) -> str:
    import hashlib
    import hmac  # signed states only

    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def _verified(text: str, key: bytes) -> str:
    """The state inside signed ``text`` if its signature is ``key``'s; else ValueError."""
    import hmac

    found = _SIGNED.match(text)
    if found is None or not text.endswith("}"):
        raise ValueError("saved run state is not signed (a key was given, so a signature is required)")
    inner = text[_SIGNED_PREFIX:-1]
    if not hmac.compare_digest(found.group(1), _sign(_key(key), inner)):
        raise ValueError("saved run state's signature does not match: it was altered, or signed with another key")
    return inner
