"""
The saved form of a record: its writer, its strict and fast readers and its signature, derived from its fields.

Each field of the run's state declares beside itself how it is saved and checked: ``attrs.field(metadata=...)``
holding a :class:`~agent_fsm.engine._codecs.Codec` (its kind's strict rule, writer and fast rule, whether it
was added to the format later, whether it rests compact). A :class:`SavedForm` reads those declarations at run
time through ``attrs.fields(cls)``: this module sits below the record in the kernel's layers and never imports
it. The record's module builds one form over its class at import and its ``to_json`` / ``from_json`` delegate
to it, an import downwards (the layering allows no import from here back up, not even inside a function). No
list of field names is written twice: the writer, both readers and the writer of a state committed again and
again each derive from the one declaration per field. Sections: the form, the writer of a state committed
again and again, signature.
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
    Quick,
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
_SCALARS = ("count", "whole", "flag", "text", "maybe")


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
        self._keys = frozenset(self._top[0])
        self._absent = tuple((i, f.name, _default_of(f)) for i, f in enumerate(fields) if f.name in self.added)
        # Fields saved by leaving them out while they hold the value of a state saved before them.
        self._legacy = tuple((name, c.legacy) for name, c in codecs.items() if c.legacy is not NO_LEGACY)
        self._rules = tuple((name, self._nested_read if c.nested else c.read) for name, c in codecs.items())
        self._get = operator.itemgetter(*self.fields)
        groups: dict[str, list[int]] = {kind: [] for kind in _SCALARS}
        compound: list[tuple[int, Quick, type]] = []
        for i, c in enumerate(codecs.values()):
            if c.nested:
                compound.append((i, self._nested_quick, dict))
            elif isinstance(c.quick, str):
                groups[c.quick].append(i)  # an unknown kind: KeyError at import
            else:
                compound.append((i, c.quick, c.empty or _Nothing))
        self._counts, self._wholes, self._flags, self._texts, self._maybes = (tuple(groups[k]) for k in _SCALARS)
        self._compound = tuple(compound)
        self._values = operator.attrgetter(*self.fields)
        self._converted: tuple[tuple[int, Callable[[Any], Any]], ...] = tuple(
            (i + 1, self._nested_data if c.nested or c.write is None else c.write)
            for i, c in enumerate(codecs.values())
            if c.nested or c.write is not None
        )
        self.immutable = frozenset(
            {int, str, float, bool, type(None), Compaction, *(t for c in codecs.values() for t in c.builds)}
        )

    # -- writing --

    def data(self, state: Any) -> dict[str, Any]:
        """``state`` as the plain JSON data :meth:`dump` writes."""
        values = [FORMAT, *self._values(state)]
        for index, write in self._converted:
            values[index] = write(values[index])
        data = dict(zip(self._top[0], values, strict=True))
        for name, legacy in self._legacy:
            if data[name] == legacy:
                del data[name]
        return data

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

    def quick(self, data: dict[str, Any]) -> Any:
        """
        ``data`` (a freshly parsed saved state) as a state if it is plainly valid, else ``None``.

        "Plainly valid" is exactly what :meth:`read` accepts, and the state built is equal to the one it
        builds. The parsed data is owned by the state afterwards (its messages are kept, not copied), so the
        caller must have parsed it for this call alone.
        """
        if not ENABLED:
            return None
        keys = data.keys()
        compound = self._compound
        try:
            if keys == self._keys:  # every field there: read them in one C call
                values = list(self._get(data))
            else:  # a state saved before the fields added later: those absent take their defaults
                if not keys <= self._keys or "format" not in keys or not self._keys - keys <= self.added:
                    return None
                values = list(map(data.get, self.fields))
                absent = set()
                for index, name, make in self._absent:
                    if name not in data:
                        values[index] = make()
                        absent.add(index)
                compound = tuple(item for item in compound if item[0] not in absent)
            for i in self._counts:
                value = values[i]
                if type(value) is not int or value < 0:
                    return None
            for i in self._wholes:
                if type(values[i]) is not int:
                    return None
            for i in self._flags:
                if type(values[i]) is not bool:
                    return None
            for i in self._texts:
                if type(values[i]) is not str:
                    return None
            for i in self._maybes:
                value = values[i]
                if value is not None and type(value) is not str:
                    return None
            for i, read, empty in compound:  # an empty value of its field's type stands as it is: no call
                value = values[i]
                if value or type(value) is not empty:
                    values[i] = read(value, data)
            return self.cls(*values)
        except (KeyError, TypeError, Decline):  # a record field missing, a name not even hashable, declined
            return None

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


class _Nothing:
    """The type of no parsed value: a field with no empty value calls its fast rule on every value."""


def _default_of(field: Any) -> Callable[[], Any]:
    """What a state saved before ``field`` holds: its legacy value, its factory's, or its (immutable) default."""
    legacy = field.metadata["saved"].legacy
    if legacy is not NO_LEGACY:
        return functools.partial(_same, legacy)
    default = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return default.factory  # type: ignore[no-any-return]
    return functools.partial(_same, default)


def _same(value: Any) -> Any:
    return value


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
        self.grows = tuple((name, form.codecs[name].write) for name in grows)
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
        values = bare.values(state)
        try:
            # The fields whose value is not the very object last written (found in C), then those of them changed.
            for i in itertools.compress(bare.indices, map(operator.is_not, values, seen)):
                value, kept = values[i], seen[i]
                if type(kept) is _Copy and kept.holds(value):
                    continue
                convert, legacy = bare.convert[i], bare.legacy[i]
                if legacy is not NO_LEGACY and value == legacy:
                    texts[bare.slots[i]] = ""  # saved by leaving it out, as dump does
                else:
                    texts[bare.slots[i]] = bare.keys[i] + _encoded(value if convert is None else convert(value))
                seen[i] = bare.kept(value)
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
        try:
            found = []
            for (name, write), start in zip(self._bare.grows, since, strict=True):
                items = getattr(state, name)[start:]
                found.append(_encoded(items if write is None else write(items))[1:-1] if items else "")
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"the run state cannot be saved as strict JSON: {exc}") from exc
        return tuple(found)


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
