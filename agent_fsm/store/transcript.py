"""
A stored run's record written once: each commit writes what it added to the transcript, not the transcript again.

A state column (the run's, each checkpoint's) holds the state with empty
``messages`` and ``observations`` lists, and their counts in columns of the
same names. Each checkpoint row also holds, in ``new_messages`` and
``new_observations``, the items added since the checkpoint before it (their
JSON texts, comma-joined); the run's row holds those added since its latest
checkpoint (while an effect is in flight). A state is read back by joining
the pieces in order into its text, which then goes through the strict reader
as any saved state does: the pieces are data, never authority. A commit
writes the state without its lists through :class:`agent_fsm.engine.StateWriter`,
which encodes again only the fields changed since the run's commit before.

A state column whose counts are ``NULL`` holds the whole state itself
(written before migration 4, or by a commit whose earlier messages were no
longer the ones stored: the run is then kept whole from there on).
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Sequence
from typing import Any

import attrs

from agent_fsm.engine import RunState
from agent_fsm.store.errors import DamagedRun

__all__ = ["Parts", "parts", "split_saved", "whole"]

_ENCODER = json.JSONEncoder(allow_nan=False)  # the saved state's own encoding: strict JSON, ASCII escapes
_DECODER = json.JSONDecoder()
# The saved format writes these fields first, in this order: the lists go back exactly there.
_HEAD = re.compile(r'\{"format": [0-9]+, "messages": ')
_BETWEEN = ', "observations": '
_BARE = re.compile(r'\{"format": [0-9]+, "messages": \[\], "observations": \[\]')
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


def whole(text: Any, pieces: Sequence[Sequence[Any]]) -> Any:
    """
    The state text ``text`` with its lists' ``pieces`` (``(new_messages, new_observations)`` each, in order) put back.

    A text not laid out as this store writes a state without its lists is
    returned as it is (the strict reader decides what it is).

    Raises:
        DamagedRun: a piece is not text (the row was written by something else).
    """
    head = _BARE.match(text) if isinstance(text, str) else None
    if head is None:
        return text
    if not all(isinstance(piece, str) for row in pieces for piece in row[:2]):
        raise DamagedRun("a piece of its transcript is missing or not text: the row was written by something else")
    messages = ", ".join(row[0] for row in pieces if row[0])
    observations = ", ".join(row[1] for row in pieces if row[1])
    start = text.index('"messages"')
    return f'{text[:start]}"messages": [{messages}]{_BETWEEN}[{observations}]{text[head.end() :]}'


def split_saved(text: Any) -> Parts | None:
    """A whole saved state's text as :func:`parts` would write it from row 0; ``None`` if it is not one."""
    return _split(text) if isinstance(text, str) else None
