"""
Durable runs, the kernel's side: what a run tells a store, and when.

The kernel knows no database. It calls a :class:`Checkpointer` at three
moments: when a run begins, before an effectful handler runs (an
:class:`Intent`: which call, with which arguments, under which idempotency
key) and after it (the observation is then in the state), and whenever the
run rests. A store (:mod:`agent_fsm.store`) commits each call before
returning, so after a crash the last commit says exactly which effect may
have happened without being observed.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Protocol

import attrs

from agent_fsm.engine.state import RunState
from agent_fsm.engine.tools import ToolCall

__all__ = [
    "Checkpointer",
    "Intent",
    "ToolContext",
    "fingerprint",
    "idempotency_key",
    "mark_pause",
]


@attrs.frozen
class ToolContext:
    """
    What a handler that takes a ``context`` parameter is told about its call.

    ``idempotency_key`` is the same every time this very call is run again
    (a retry, a recovery after a crash, an approved "outcome unknown"), and
    differs for any other call: pass it downstream (an ``Idempotency-Key``
    header, a unique column) and the effect happens at most once.
    """

    run_id: str
    call_id: str
    idempotency_key: str


@attrs.frozen
class Intent:
    """An effectful call about to cross the boundary, committed before its handler runs."""

    call_id: str
    tool: str
    fingerprint: str
    idempotency_key: str


class Checkpointer(Protocol):
    """
    Where a run's state is committed; :class:`agent_fsm.store.RunStore` is the full store.

    Each method returns only once the state is durable: the engine runs no
    handler after :meth:`save` with an intent until that intent is committed.
    """

    def begin(self, run_id: str, state: RunState) -> None:
        """Record a new run; refuse a ``run_id`` already used."""

    def save(self, run_id: str, state: RunState, intent: Intent | None = None) -> None:
        """Commit ``state``; ``intent`` is the effect about to run (``None``: none in flight)."""


def fingerprint(call: ToolCall) -> str:
    """
    A digest of the call id, tool name and canonical arguments: equal exactly for the same call.

    Canonical means sorted keys and no whitespace, so key order in the
    model's text does not matter; the call id is included so that an
    identical proposal made later is a different call.
    """
    arguments = call.arguments if call.arguments is not None else {"<unparsed>": call.raw_arguments}
    text = json.dumps([call.call_id, call.name, arguments], sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def idempotency_key(run_id: str, state: RunState, call: ToolCall) -> str:
    """
    The key of ``call`` at the head of ``state.pending``: stable across retries, crashes and approvals.

    It is derived from the run, the call's place in the run (how many
    observations precede it: a model may reuse call ids across turns) and
    its fingerprint, so nothing needs to be stored to find it again.
    """
    text = f"{run_id}\x00{len(state.observations)}\x00{fingerprint(call)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def mark_pause(state: RunState) -> None:
    """Give a run resting in ``AwaitingApproval`` its pause id (once): a decision names the pause it decides."""
    if state.machine_state == "AwaitingApproval" and state.pause_id is None:
        state.pause_id = uuid.uuid4().hex
