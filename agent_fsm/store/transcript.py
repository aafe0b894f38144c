"""
A stored run's record written once: each commit writes what its growing lists gained, not the lists again.

The fields of a state declared ``grows`` (:data:`agent_fsm.engine.GROWING`:
the transcript's ``messages`` and ``observations``, the prompt sizes, the
path, the screens, the compactions) only grow. A state column (the run's,
each checkpoint's) holds the state with those lists empty. The transcript's
lengths are in columns of the same names, and each checkpoint row holds, in
``new_messages`` and ``new_observations``, the items added since the
checkpoint before it (their JSON texts, comma-joined); its ``grown`` column
holds the other lists' lengths and items added (:func:`grown`). The run's
row holds those added since its latest checkpoint (while an effect is in
flight). A state is read back by joining the items in order into its text
(:func:`whole`), which then goes through the strict reader as any saved
state does: the pieces are data, never authority. A commit writes the state
without its lists through :class:`agent_fsm.engine.StateWriter`, which
encodes again only the fields changed since the run's commit before, and
the items it adds.

A row whose transcript lengths are ``NULL`` holds the whole state itself
(written before migration 4, or by a commit whose earlier items were no
longer the ones stored); one whose ``grown`` is ``NULL`` holds the other
lists whole (written before migration 8). Either is where the rows after it
start from.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Sequence
from typing import Any

import attrs

from agent_fsm.engine import GROWING, RunState
from agent_fsm.store.errors import DamagedRun

__all__ = ["GROWN", "Parts", "grown", "grown_counts", "parts", "split_saved", "whole"]

TRANSCRIPT = GROWING[:2]
"""The growing lists kept in columns of their own (``new_messages``, ``new_observations``): the transcript."""
GROWN = GROWING[2:]
"""The other growing lists, kept in a row's ``grown`` column (prompt sizes, path, screens, compactions, ...)."""
if TRANSCRIPT != ("messages", "observations"):  # pragma: no cover - the columns of migration 4 are these two
    raise RuntimeError(f"the store keeps the transcript's lists in their own columns, not {TRANSCRIPT}")

_GROWN_KEYS = tuple(f'"{name}": [' for name in GROWN)  # each field's key in a ``grown`` column, and its pair opened
_ENCODER = json.JSONEncoder(allow_nan=False)  # the saved state's own encoding: strict JSON, ASCII escapes
_DECODER = json.JSONDecoder()
_scan: Any = _DECODER.scan_once  # type: ignore[attr-defined]  # one JSON value at an index: (value, end)
_SPACE = re.compile(r"[ \t\n\r]*")
# The saved format writes these fields first, in this order: the lists go back exactly there.
_HEAD = re.compile(r'\{"format": [0-9]+, "messages": ')
_BETWEEN = ', "observations": '
# A state's fields, read in one C call: a shallow copy sets them on a bare object (copy.copy goes
# through __reduce_ex__ and a dict, three times the cost).
_FIELDS = tuple(field.name for field in attrs.fields(RunState))
_values = operator.attrgetter(*_FIELDS)
_set = object.__setattr__


def _shallow(state: RunState, observations: list[Any]) -> RunState:
    """A shallow copy of ``state`` with no messages and only ``observations``."""
    bare = object.__new__(RunState)
    for name, value in zip(_FIELDS, _values(state), strict=True):
        _set(bare, name, value)
    bare.messages = []
    bare.observations = observations
    return bare


@attrs.frozen
class Parts:
    """A state as a commit writes it: its text with empty lists, and the texts of the items it adds to each."""

    text: str
    messages: list[str]
    observations: list[str]


def _split(text: str) -> Parts | None:
    """A whole state's text cut into its text with empty lists and the items of each; ``None`` if not laid out so."""
    head = _HEAD.match(text)
    if head is None:
        return None
    try:
        messages, end = _DECODER.raw_decode(text, head.end())
        if not text.startswith(_BETWEEN, end):
            return None
        observations, tail = _DECODER.raw_decode(text, end + len(_BETWEEN))
        if not isinstance(messages, list) or not isinstance(observations, list):
            return None
        return Parts(
            f"{text[: head.end()]}[]{_BETWEEN}[]{text[tail:]}",
            [_ENCODER.encode(item) for item in messages],
            [_ENCODER.encode(item) for item in observations],
        )
    except (TypeError, ValueError, RecursionError):
        return None


def parts(state: RunState, messages: int = 0, observations: int = 0) -> Parts | None:
    """
    ``state`` cut as :func:`split_saved` cuts a saved state, its first ``messages`` and ``observations`` left out.

    ``None`` where the saved format does not lay the lists out where they can be put back.

    Raises:
        ValueError: the state holds something strict JSON cannot (as :meth:`RunState.to_json`).
    """
    later = _shallow(state, state.observations[observations:])
    later.messages = state.messages[messages:]
    return _split(later.to_json())


def _spans(text: str) -> dict[str, tuple[int, int]] | None:
    """Where each top-level field's value stands in a state's ``text`` (start, end); ``None`` if it is not an object."""
    spans: dict[str, tuple[int, int]] = {}
    try:
        if not text.startswith("{"):
            return None
        at = _skip(text, 1)
        if text.startswith("}", at):
            return spans if _skip(text, at + 1) == len(text) else None
        while True:
            if not text.startswith('"', at):
                return None
            name, at = _scan(text, at)
            at = _skip(text, at)
            if not text.startswith(":", at):
                return None
            at = _skip(text, at + 1)
            end = _scan(text, at)[1]
            spans[name] = (at, end)
            at = _skip(text, end)
            if text.startswith(",", at):
                at = _skip(text, at + 1)
            elif text.startswith("}", at):
                return spans if _skip(text, at + 1) == len(text) else None
            else:
                return None
    except (StopIteration, ValueError, RecursionError):
        return None


def _skip(text: str, at: int) -> int:
    """The index of the first character from ``at`` on that is not JSON's white space."""
    found = _SPACE.match(text, at)
    return found.end() if found is not None else at


def _empty(text: str, span: tuple[int, int] | None) -> bool:
    """Whether the value at ``span`` of ``text`` is an empty list, as a state written without its lists holds."""
    return span is not None and text[span[0] : span[1]] == "[]"


def _inner(text: str, span: tuple[int, int] | None) -> str:
    """The items of the list at ``span`` of ``text``, as written (``""`` for none, or no such field)."""
    if span is None:
        return ""
    value = text[span[0] : span[1]]
    if not value.startswith("[") or not value.endswith("]"):
        raise DamagedRun("a growing list of its state is not a list")
    return value[1:-1].strip()


def grown(counts: Sequence[int], added: Sequence[str]) -> tuple[str, str]:
    """
    A row's ``grown`` column, and the run's row's at that checkpoint: per growing field, its length and items added.

    Per field of :data:`GROWN` still not empty (one left out is); the
    second holds no items (the run's row at a checkpoint: nothing added
    since it). Both made in one pass, as a checkpoint's commit writes both.
    JSON: ``{"path": [12, ["Ready", ...]], ...}``.
    """
    pieces, rest = [], []
    for key, count, piece in zip(_GROWN_KEYS, counts, added, strict=True):
        if count:
            pieces.append(f"{key}{count}, [{piece}]]")
            rest.append(f"{key}{count}, []]")
    return "{" + ", ".join(pieces) + "}", "{" + ", ".join(rest) + "}"


def grown_counts(text: Any) -> tuple[int, ...] | None:
    """The lengths a ``grown`` column records (``None``: it holds something else)."""
    found = _grown(text)
    return None if found is None else tuple(found.get(name, (0, []))[0] for name in GROWN)


def _grown(text: Any) -> dict[str, tuple[int, list[Any]]] | None:
    try:
        data = _DECODER.decode(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    found = {}
    for name, value in data.items():
        if (
            name not in GROWN
            or not isinstance(value, list)
            or len(value) != 2
            or type(value[0]) is not int
            or not isinstance(value[1], list)
        ):
            return None
        found[name] = (value[0], value[1])
    return found


def whole(rows: Sequence[Sequence[Any]]) -> Any:
    """
    The last of a run's ``rows`` as a whole state's text: its growing lists put back from the rows up to it.

    Each row, oldest first: ``(messages, new_messages, new_observations,
    grown, state)``, its ``state`` read only where needed (a row whose
    ``grown`` is ``NULL``, and the last). The transcript is the latest whole
    row's (``messages`` ``NULL``: its state holds every list) followed by the
    pieces of each row after it; every other growing list the latest row
    whose ``grown`` is ``NULL`` holds (written before migration 8, or whole)
    followed by what ``grown`` adds in each row after it. A text not laid
    out so (not a JSON object, or holding a transcript) is returned as it is
    (the strict reader decides what it is).

    Raises:
        DamagedRun: a piece is missing or not text, or a list is not the length its row records.
    """
    text = rows[-1][4]
    spans = _spans(text) if isinstance(text, str) else None
    if spans is None or not all(_empty(text, spans.get(name)) for name in TRANSCRIPT):  # whole: as it is
        return text
    whole_at = max((n for n, row in enumerate(rows) if row[0] is None), default=-1)
    apart_at = max((n for n, row in enumerate(rows) if row[3] is None), default=-1)
    later = rows[whole_at + 1 :]
    if not all(isinstance(piece, str) for row in later for piece in row[1:3]):
        raise DamagedRun("a piece of its transcript is missing or not text: the row was written by something else")
    values: dict[str, str] = {}
    base = _base(rows, whole_at)
    for index, name in enumerate(TRANSCRIPT):
        first = [base.get(name, "")] if whole_at >= 0 else []
        values[name] = "[" + ", ".join(piece for piece in [*first, *(row[1 + index] for row in later)] if piece) + "]"
    base = _base(rows, apart_at)
    lists: dict[str, list[Any]] = {name: _DECODER.decode(f"[{base.get(name, '')}]") for name in GROWN}
    counts: dict[str, tuple[int, list[Any]]] = {}
    for row in rows[apart_at + 1 :]:
        found = _grown(row[3])
        if found is None:
            raise DamagedRun("the growing lists of a checkpoint are not as this store writes them")
        for name, (_, items) in found.items():
            lists[name] += items
        counts = found
    if apart_at < len(rows) - 1 and any(len(lists[name]) != counts.get(name, (0,))[0] for name in GROWN):
        raise DamagedRun("a growing list of its state is not the length its row records: a row is missing")
    values.update((name, _ENCODER.encode(items)) for name, items in lists.items())
    cut, at = [], 0
    for name in GROWING:  # into each list the state holds empty: one it holds items of, it holds whole
        span = spans.get(name)
        if span is None:
            if values[name] != "[]":
                raise DamagedRun(f"its state has no {name!r} to put the items kept apart back into")
        elif _empty(text, span):
            cut += [text[at : span[0]], values[name]]
            at = span[1]
    return "".join([*cut, text[at:]])


def _base(rows: Sequence[Sequence[Any]], at: int) -> dict[str, str]:
    """The growing lists row ``at`` holds whole in its state, as their items' text (none for ``-1``)."""
    if at < 0:
        return {}
    text = rows[at][4]
    spans = _spans(text) if isinstance(text, str) else None
    if spans is None:
        raise DamagedRun("a whole state kept in a checkpoint cannot be read")
    return {name: _inner(text, spans.get(name)) for name in GROWING}


def split_saved(text: Any) -> Parts | None:
    """A whole saved state's text as :func:`parts` would write it from row 0; ``None`` if it is not one."""
    return _split(text) if isinstance(text, str) else None
