"""What a store returns: a run's summary, the run with its state, a decision, an effect, a checkpoint, a fork."""

from __future__ import annotations

from typing import Any

import attrs

from agent_fsm.engine import Intent, RunState, ToolCall

__all__ = ["Checkpoint", "Claim", "Decision", "Effect", "Fork", "RunSummary", "StoredRun"]


@attrs.frozen
class RunSummary:
    """
    One stored run without its state: enough for a list or an inbox.

    ``status`` is ``running``, ``paused``, ``ended`` or ``failed`` (a bug
    in its gate or a handler stopped it; ``reason`` is the error); ``stop``
    the typed ending (or ``awaiting_approval``) once it rests. While paused,
    ``pause_id`` names the pause, ``blocked`` is the call waiting for a
    person and ``reason`` the gate's (or "outcome unknown ..."). When a run
    nested in the run's call paused it, ``blocked`` is that nested run's call
    (the innermost, as :func:`agent_fsm.engine.blocked_call` finds it) and
    ``reason`` its gate's; ``blocked_path`` is the call ids from the run's
    own call down to it (one id for a call of the run itself), so the
    nested run is ``run_id/blocked_path[0]/...``.

    ``problem`` says why the row cannot be read (something other than a
    store wrote it), else ``None``: a list shows one broken row and goes on.
    Text a column cannot hold (NUL, lone surrogates) is shown escaped
    (``\\u0000``); the state holds it exactly.

    ``agent`` (the paused run's agent) and ``claim`` (the live claim on its
    pause) are filled by :meth:`~agent_fsm.store.RunStore.paused`, the inbox's listing.
    """

    run_id: str
    status: str
    stop: str | None
    machine_state: str
    pause_id: str | None
    reason: str | None
    blocked: ToolCall | None
    owner: str | None
    created_at: float
    updated_at: float
    version: int
    problem: str | None = None
    blocked_path: tuple[str, ...] = ()
    agent: str | None = None
    claim: Claim | None = None


@attrs.frozen
class Claim:
    """A reviewer's claim on a paused run's pause ``pause_id``: who, since when, until when (epoch seconds)."""

    run_id: str
    pause_id: str
    reviewer: str
    claimed_at: float
    expires_at: float


@attrs.frozen
class StoredRun:
    """A stored run: its summary, its state, and the intent left open by its last checkpoint."""

    summary: RunSummary
    state: RunState
    intent: Intent | None

    @property
    def run_id(self) -> str:
        return self.summary.run_id

    @property
    def status(self) -> str:
        return self.summary.status


@attrs.frozen
class Decision:
    """A person's decision on one pause: who, when, which way, why, and any edited arguments."""

    run_id: str
    pause_id: str
    decision: str
    reviewer: str
    reason: str | None
    arguments: dict[str, Any] | None
    at: float


@attrs.frozen
class Effect:
    """
    One effectful call's record: its intent, and when (and how) it was observed.

    ``outcome`` is the observation's kind (``result``, ``error``), or
    ``interrupted`` when the process died between intent and observation.
    The effect of a run nested in the run's call has ``call_id`` prefixed by
    the calls leading to it (``t0/r1``: call ``r1`` of the run nested in ``t0``).
    """

    run_id: str
    idempotency_key: str
    tool: str
    call_id: str
    fingerprint: str
    intent_at: float
    observed_at: float | None
    outcome: str | None


@attrs.frozen
class Checkpoint:
    """
    One point a stored run can go on from, numbered from 0 (the run as begun) in the order committed.

    A checkpoint is every commit with no effect in flight: the beginning,
    each effect's observation, each pause, each interruption, the ending.
    ``stop`` is ``awaiting_approval`` at a pause, the ending once ended,
    else ``None``. :func:`agent_fsm.store.fork` starts a new run from one.
    """

    run_id: str
    point: int
    machine_state: str
    stop: str | None
    saved_at: float


@attrs.frozen
class Fork:
    """Where a forked run came from: run ``parent`` at its checkpoint ``point``, forked at ``forked_at``."""

    run_id: str
    parent: str
    point: int
    forked_at: float
