"""
A stored run's record as append-only rows: each message and observation written once, by the commit that added it.

A state column (the run's, each checkpoint's) holds the state with empty
``messages`` and ``observations`` lists and, in columns of the same names,
how many of the run's rows of each (numbered from 0) it refers to. A commit
then writes only what was added since the last one, never the whole
transcript again; a checkpoint is a state without them and two counts.
Reading puts the rows back into the state's text, which then goes through
the strict reader as any saved state does: the rows are data, never authority.

A state column whose counts are ``NULL`` holds the whole state itself
(written before the rows existed, or by a commit whose earlier messages were
no longer the ones stored: the run is then kept whole from there on).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from typing import Any

import attrs

from agent_fsm.engine import RunState
from agent_fsm.store.errors import DamagedRun

__all__ = ["PARTS", "ROWS", "Parts", "append_rows", "parts", "split_saved", "whole"]

PARTS = ("messages", "observations")
"""The growing lists kept as rows of ``agent_fsm_records`` (its ``part`` column), in the saved format's order."""

_ENCODER = json.JSONEncoder(allow_nan=False)  # the saved state's own encoding: strict JSON, ASCII escapes
_DECODER = json.JSONDecoder()
# The saved format writes these fields first, in this order: rows go back exactly there.
_HEAD = re.compile(r'\{"format": [0-9]+, "messages": ')
_BETWEEN = ', "observations": '
_BARE = re.compile(r'\{"format": [0-9]+, "messages": \[\], "observations": \[\]')


@attrs.frozen
class Parts:
    """A state as a commit writes it: its text with empty lists, and the texts of the rows it adds to each."""

    text: str
    messages: list[str]
    observations: list[str]


def append_rows(rows: int) -> str:
    """The statement writing ``rows`` rows (parameters ``run_id, part, seq, item`` for each): one per commit."""
    return "INSERT INTO agent_fsm_records (run_id, part, seq, item) VALUES " + ", ".join(["(?, ?, ?, ?)"] * rows)


ROWS = "SELECT seq, item FROM agent_fsm_records WHERE run_id = ? AND part = ? AND seq < ? ORDER BY seq"
"""A run's first rows of one part (parameters ``run_id, part, count``)."""


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
    What a commit writes of ``state`` when its first ``messages`` and ``observations`` are stored as rows already.

    ``None`` where the saved format does not lay the lists out where rows can go back.

    Raises:
        ValueError: the state holds something strict JSON cannot (as :meth:`RunState.to_json`).
    """
    added = copy.copy(state)
    added.messages = state.messages[messages:]
    added.observations = state.observations[observations:]
    return _split(added.to_json())


def whole(
    run_id: str, text: Any, counts: tuple[Any, Any], rows: tuple[Sequence[Sequence[Any]], Sequence[Sequence[Any]]]
) -> Any:
    """
    The state text ``text`` with the run's first rows put back (``text`` as it is when the counts are ``NULL``).

    Raises:
        DamagedRun: the rows are not the run's rows ``0`` to ``count - 1`` of each part, or a count is no count.
    """
    if counts == (None, None):
        return text
    for part, count, found in zip(PARTS, counts, rows, strict=True):
        if type(count) is not int or not isinstance(text, str):
            raise DamagedRun(f"the state stored for run {run_id!r} cannot be read: its {part} count is {count!r}")
        if len(found) != count or any(row[0] != seq or not isinstance(row[1], str) for seq, row in enumerate(found)):
            raise DamagedRun(
                f"the state stored for run {run_id!r} cannot be read: it refers to {count} rows of {part}, and"
                f" {len(found)} are stored"
            )
    head = _BARE.match(text)
    if head is None:  # not a state this store wrote without its lists: read as it is (the strict reader decides)
        return text
    messages, observations = (", ".join(row[1] for row in found) for found in rows)
    start = text.index('"messages"')
    return f'{text[:start]}"messages": [{messages}]{_BETWEEN}[{observations}]{text[head.end() :]}'


def split_saved(text: Any) -> Parts | None:
    """A whole saved state's text as :func:`parts` would write it from row 0; ``None`` if it is not one."""
    return _split(text) if isinstance(text, str) else None
