"""
``recover``: continue the runs a dead process left in flight, never doubling an effect.

A run is *in flight* when the store still says ``running`` and nothing was
committed for it for ``older_than`` seconds. Each is claimed (a
compare-and-set, so two recoverers never continue the same run) and goes on
from its last checkpoint; an effect that was in flight is settled by the
kernel's rule (:mod:`agent_fsm.engine.recovery`): an idempotent tool is run
again under the same key, any other call waits for a person, "outcome unknown".
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from agent_fsm.engine.callbacks import AnswerCheck
from agent_fsm.engine.endings import EndingRule
from agent_fsm.engine.gates import Gate
from agent_fsm.engine.limits import Limits
from agent_fsm.engine.models import Model
from agent_fsm.engine.observe import TokenEstimator, estimate_tokens
from agent_fsm.engine.recovery import continue_run
from agent_fsm.engine.state import RunResult
from agent_fsm.engine.tools import Registry
from agent_fsm.store.protocol import RunStore

__all__ = ["Recovered", "recover"]


@attrs.frozen
class Recovered:
    """
    One run taken over by :func:`recover`: how it rests now, or why it could not go on.

    ``interrupted`` names the call that was in flight at the crash (its
    intent committed, its observation not), if any.
    """

    run_id: str
    result: RunResult | None
    interrupted: str | None = None
    error: str | None = None


def recover(
    store: RunStore,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None = None,
    limits: Limits | None = None,
    older_than: float = 60.0,
    answer_check: AnswerCheck | None = None,
    estimator: TokenEstimator = estimate_tokens,
    endings: EndingRule | None = None,
    progress: Callable[[Recovered], None] | None = None,
) -> list[Recovered]:
    """
    Continue every run left ``running`` with no commit for ``older_than`` seconds, each until it rests.

    Choose ``older_than`` above the longest a live process may go without
    a commit (a slow model call or handler): a live run claimed by mistake
    is stopped at its next checkpoint (:class:`RunTakenOver`), and its
    in-flight call is then settled like a crashed one. ``progress`` is told
    of each run as it is done. A run that fails again (a handler bug, a
    store that cannot commit it) is reported with its error and left claimed
    for a later attempt; recovery goes on with the next run.
    """
    done = []
    for stored in store.claim_stale(older_than):
        interrupted = stored.intent.call_id if stored.intent is not None else None
        try:
            result = continue_run(
                stored.state,
                model,
                tools,
                store=store,
                run_id=stored.run_id,
                intent=stored.intent,
                gate=gate,
                limits=limits,
                answer_check=answer_check,
                estimator=estimator,
                endings=endings,
            )
            outcome = Recovered(stored.run_id, result, interrupted)
        except Exception as exc:  # one run's failure, whatever it is, must not leave the next runs unrecovered
            outcome = Recovered(stored.run_id, None, interrupted, f"{type(exc).__name__}: {exc}")
        done.append(outcome)
        if progress is not None:
            progress(outcome)
    return done
