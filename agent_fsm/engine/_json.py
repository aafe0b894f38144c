"""
Plain JSON data: checking what arrives, and storing what handlers return.

Both directions meet values nobody vouched for. Arguments come from model
text or a server's reply and may nest a thousand levels, hold ``NaN`` (which
Python's ``json`` reads), or be cyclic objects from an in-process model;
handler results may hold tuple keys, cycles or integers JSON text cannot
carry. Nothing here recurses without a bound, so none of it can raise
``RecursionError``.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

__all__ = ["DEPTH_CEILING", "argument_problem", "describe", "nesting_exceeds", "storable"]


# --- jsondata ---

DEPTH_CEILING = 100
"""No stored value nests deeper: deeper ones could not be saved (``json`` and ``cattrs`` recurse)."""

# Python refuses to turn an int of more than 4300 digits into text (sys.get_int_max_str_digits),
# so such an int cannot be written as JSON; 14,000 bits stays below that whatever the setting's default.
_INT_BITS = 14_000


def _where(path: tuple[Any, ...]) -> str:
    if len(path) > 6:  # a hostile path can be as long as the document; keep its ends
        return "/".join(str(p)[:40] for p in (*path[:3], "...", *path[-2:]))
    return "/".join(str(p)[:40] for p in path) or "(top level)"


def argument_problem(value: Any, *, max_depth: int) -> str | None:
    """
    Why ``value`` is not acceptable JSON data as tool arguments, or ``None``.

    Refused: containers nested deeper than ``max_depth``, object keys that
    are not strings, ``NaN``/``Infinity`` (JSON has no such numbers, and
    every comparison with ``NaN`` is false, so ``maximum`` and a gate's
    ``amount > 20`` would both let it through), integers too long to write
    as JSON text, and anything that is not a dict, list, str, number, bool or None.
    """
    if type(value) is dict and max_depth >= 1:
        # The common case, flat arguments of plain scalars, without the general walk's bookkeeping.
        for key, child in value.items():
            kind = type(child)
            if type(key) is not str or not (
                kind is str
                or kind is bool
                or child is None
                or (kind is int and child.bit_length() <= _INT_BITS)
                or (kind is float and math.isfinite(child))
            ):
                break
        else:
            return None
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(value, 0, ())]
    while stack:
        item, depth, path = stack.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{_where(path)}: {item!r} is not a JSON number (NaN and Infinity are refused)"
            continue
        if isinstance(item, int):
            if item.bit_length() > _INT_BITS:
                return f"{_where(path)}: an integer of {item.bit_length()} bits is too large to be JSON data"
            continue
        if isinstance(item, (dict, list)):
            if depth >= max_depth:
                return f"{_where(path)}: arguments nest deeper than {max_depth} levels"
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        return f"{_where(path)}: object key {key!r} is not a string"
                    stack.append((child, depth + 1, (*path, key)))
            else:
                stack.extend((child, depth + 1, (*path, index)) for index, child in enumerate(item))
            continue
        if isinstance(item, str):
            continue
        return f"{_where(path)}: a {kind.__name__} is not JSON data"
    return None


def nesting_exceeds(value: Any, limit: int) -> bool:
    """Whether dicts and lists in ``value`` nest deeper than ``limit`` (cycles count as infinitely deep)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class _Unstorable(Exception):
    """Raised inside :func:`storable` when a result must be kept as text."""


def _json_key(key: Any) -> str:
    # The keys json.dumps accepts besides str, written as it writes them.
    if isinstance(key, str):
        return str.__str__(key)
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        if math.isfinite(key):
            return float.__repr__(key)
        return "NaN" if key != key else ("Infinity" if key > 0 else "-Infinity")
    raise _Unstorable


def _copy(value: Any, depth: int, texts: list[bool]) -> Any:
    # The fast path: exact plain types are copied as they are.
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        if value.bit_length() > _INT_BITS:
            raise _Unstorable
        return value
    if kind is float:
        if not math.isfinite(value):
            raise _Unstorable
        return value
    if depth >= DEPTH_CEILING:
        raise _Unstorable  # too deep to save, or a cycle
    if kind is dict:
        out = {}
        for key, child in value.items():
            if type(key) is not str:
                key = _json_key(key)
            leaf = type(child)
            # Strings, bools and None inline: most results are flat records of them.
            out[key] = child if leaf is str or leaf is bool or child is None else _copy(child, depth + 1, texts)
        return out
    if kind is list:
        return [_copy(child, depth + 1, texts) for child in value]
    return _convert(value, depth, texts)


def _convert(value: Any, depth: int, texts: list[bool]) -> Any:
    # What json.loads(json.dumps(value, default=str)) made of other types, without the round trip.
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return _copy(int.__int__(value), depth, texts)
    if isinstance(value, float):
        return _copy(float.__float__(value), depth, texts)
    if isinstance(value, dict):
        return _copy(dict(value), depth, texts)
    if isinstance(value, (list, tuple)):
        return _copy(list(value), depth, texts)
    texts.append(True)  # json's default=str: the object is kept as its text
    try:
        return str(value)
    except Exception as exc:
        raise _Unstorable from exc


def storable(value: Any) -> tuple[Any, bool]:
    """
    ``value`` as plain JSON data, and whether any of it had to be kept as text.

    Plain data (dicts with string keys, lists, str, finite numbers, bools,
    None) is copied as is; tuples become lists and number, bool or None keys
    become their JSON text, as ``json`` writes them; other objects become
    their ``str``. A value JSON cannot hold at all (a cycle, a tuple key,
    ``NaN``, an integer too long for JSON text, nesting past
    :data:`DEPTH_CEILING`) is kept whole as its text form (:func:`describe`),
    so the record of an effect that happened is never lost.
    """
    texts: list[bool] = []
    try:
        return _copy(value, 0, texts), bool(texts)
    except (_Unstorable, RecursionError):
        return describe(value), True


class _BoundedRepr(reprlib.Repr):
    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 24
        self.maxdict = self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdeque = 10_000
        self.maxstring = self.maxother = self.maxlong = 100_000

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > _INT_BITS:
            return f"<int of {x.bit_length()} bits: {hex(x)[:40]}...>"
        return int.__repr__(x)


def describe(value: Any) -> str:
    """
    A text form of any value: its ``repr``, or, when that fails (too deep,
    an integer too long to print, a raising ``__repr__``), a bounded ``repr``.
    """
    try:
        return repr(value)
    except Exception:
        pass
    try:
        return _BoundedRepr().repr(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
