"""
``recover``: continue the runs a dead process left in flight, never doubling an effect.

A run is *in flight* when the store still says ``running`` and nothing was
committed for it for ``older_than`` seconds. Each is claimed (under row
locks, so two recoverers never continue the same run) and goes on
from its last checkpoint; an effect that was in flight is settled by the
kernel's rule (:mod:`agent_fsm.engine._launch`, its "recovery" section): an idempotent tool is run
again under the same key, any other call waits for a person, "outcome unknown".
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from agent_fsm import Agent
from agent_fsm.engine import RunResult, continue_run
from agent_fsm.store.protocol import RunStore
from agent_fsm.store.rows import addressed

__all__ = ["Recovered", "recover"]


@attrs.frozen
class Recovered:
    """
    One run taken over by :func:`recover`: how it rests now, or why it could not go on.

    ``interrupted`` names the call that was in flight at the crash (its
    intent committed, its observation not), if any; a nested run's call
    with the calls leading to it (``t0/r1``).
    """

    run_id: str
    result: RunResult | None
    interrupted: str | None = None
    error: str | None = None


def recover(
    store: RunStore,
    agent: Agent,
    *,
    older_than: float = 60.0,
    progress: Callable[[Recovered], None] | None = None,
) -> list[Recovered]:
    """
    Continue every run left ``running`` with no commit for ``older_than`` seconds, as ``agent``, each until it rests.

    ``agent`` is what each run goes on with (its gate judges the interrupted
    call again; ``agent.limits=None`` keeps each run's saved limits).

    Choose ``older_than`` above the longest a live process may go without
    a commit (a slow model call or handler): a live run claimed by mistake
    is stopped at its next checkpoint (:class:`RunTakenOver`), and its
    in-flight call is then settled like a crashed one. ``progress`` is told
    of each run as it is done. A run that fails again is reported with its
    error, and recovery goes on with the next run: a bug in its gate or a
    handler leaves it ``failed`` (see :meth:`agent_fsm.store.SqlStore.fail`),
    a store that cannot commit it leaves it claimed for a later attempt.

    Raises:
        TypeError: ``agent`` is not an :class:`~agent_fsm.Agent` (no run is claimed).
    """
    if not isinstance(agent, Agent):  # before any claim: a claimed run not continued waits older_than again
        raise TypeError(f"'agent' must be an Agent (got {agent!r} that is a {type(agent).__name__}).")
    done = []
    for stored in store.claim_stale(older_than):
        interrupted = addressed(stored.intent) if stored.intent is not None else None
        try:
            result = continue_run(agent, stored.state, store=store, run_id=stored.run_id, intent=stored.intent)
            outcome = Recovered(stored.run_id, result, interrupted)
        except Exception as exc:  # one run's failure, whatever it is, must not leave the next runs unrecovered
            outcome = Recovered(stored.run_id, None, interrupted, f"{type(exc).__name__}: {exc}")
        done.append(outcome)
        if progress is not None:
            progress(outcome)
    return done
