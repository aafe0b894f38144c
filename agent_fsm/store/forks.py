"""
Forking a stored run: a new run that starts where an earlier one stood at one of its checkpoints.

The store keeps the state of every checkpoint (:class:`agent_fsm.store.Checkpoint`):
the run as begun, after each effect's observation, at each pause, at its
end. :func:`fork` copies one into a new run, so a real run can be replayed
from that point with another model, another gate or another decision.

The copy is data, never authority. It is a new run: its own id, its own
pause ids and idempotency keys (both derive from the run id, so nothing the
parent was approved for or did carries over), and whatever continues it
judges every pending call afresh, as any loaded state is judged. A fork
records where it came from (:meth:`agent_fsm.store.SqlStore.forked_from`).
"""

from __future__ import annotations

import copy

import attrs

from agent_fsm.engine import RunState, new_nonce
from agent_fsm.store.protocol import RunStore
from agent_fsm.store.records import StoredRun

__all__ = ["fork", "forked_state"]


def forked_state(state: RunState, new_run_id: str) -> RunState:
    """
    ``state`` as the first state of run ``new_run_id``: a copy whose identity is the new run's.

    A paused state gets a pause id of the new run (the parent's pause, decided
    or not, is not this one); the copy is not marked consumed. The runs
    nested in it are renamed with it (``new_run_id/CALL_ID``), their pauses too.
    """
    forked = copy.deepcopy(state)
    _renamed(forked, new_run_id)
    return forked


def _renamed(state: RunState, run_id: str) -> None:
    """``state`` (a copy) as run ``run_id``'s, and each run nested in it as ``run_id/CALL_ID``: one run id tree."""
    state.run_id = run_id
    state.nonce = new_nonce()  # a new run: its idempotency keys are its own
    state.consumed = False
    if state.pause is not None:
        ordinal = max(state.path.count("AwaitingApproval"), 1)
        state.pause = attrs.evolve(state.pause, pause_id=f"{run_id}.{ordinal}")
        state.pause_id = state.pause.pause_id
    else:
        state.pause_id = None
    for call_id, child in (state.children or {}).items():
        _renamed(child, f"{run_id}/{call_id}")


def fork(store: RunStore, run_id: str, *, at: int, new_run_id: str) -> StoredRun:
    """
    Begin run ``new_run_id`` in ``store`` from run ``run_id``'s checkpoint ``at`` (0: as it began).

    The new run is stored as that checkpoint left it: paused (decide it with
    :func:`agent_fsm.store.approve` or :func:`~agent_fsm.store.reject`, as
    any agent, with any decision) or running (drive it on with
    ``agent.advance(forked.state, store=store, run_id=new_run_id)``; left
    running, :func:`agent_fsm.store.recover` takes it up like any run in
    flight). Its record says it was forked from ``run_id`` at ``at``.

    Raises:
        RunNotFound: no run ``run_id``, or it has no checkpoint ``at`` (see ``store.checkpoints``).
        RunExists: ``new_run_id`` is taken.
        ValueError: ``at`` is not a checkpoint number, or the checkpoint is the run's ending (nothing goes on from it).
        DamagedRun: the stored checkpoint cannot be read, or is another run's.
    """
    return store.fork(run_id, at=at, new_run_id=new_run_id)
