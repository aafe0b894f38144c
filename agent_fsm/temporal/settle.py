"""
Settling an effectful call whose activity ended without a result, by the kernel's recovery rule.

Temporal has already tried the call as often as its retry policy allows
(once for a tool that is not idempotent), so nothing is run again here:
the step into ``Executing`` is rolled back to the checkpoint taken at the
call's intent and the run pauses, "outcome unknown", naming the call's
idempotency key (:mod:`agent_fsm.engine._launch`, its "recovery" section). A person checks the
world and approves (the call runs once more, under the same key) or rejects.
"""

from __future__ import annotations

import attrs

from agent_fsm import Agent, Limits
from agent_fsm.engine import Nested, RunContext, RunError, RunState, settle_intent
from agent_fsm.temporal.proxies import IntentLog

__all__ = ["settle_unknown"]


def settle_unknown(log: IntentLog, agent: Agent) -> RunState:
    """
    The run paused on the interrupted call of ``log``'s open intent, as recovery after a crash pauses it.

    The call of a nested run (``intent.path``) is settled in that run, by
    its agent's contracts; the runs above it are left in ``Executing`` on the
    calls that run it, for :func:`agent_fsm.engine.acontinue_run` to pause
    each on the nested pause, judged by its own gate.

    Raises:
        RunError: no intent is open (an outcome can only be unknown for an effect that was begun).
    """
    top, intent = log.at_intent, log.intent
    if top is None or intent is None:
        raise RunError("an effect's outcome is unknown but no intent was recorded for it", state=log.live)
    state = top
    for call_id in intent.path.split("/") if intent.path else ():  # down to the nested run that made the call
        spec = agent.tools.get(state.pending[0].name) if state.pending else None
        child = state.children.get(call_id) if state.children else None
        if spec is None or not isinstance(spec.handler, Nested) or child is None:
            raise RunError(f"the intent's path {intent.path!r} leads to no run nested in this one", state=top)
        agent, state = spec.handler.agent, child
    # Never re-run here: the retry policy spent its attempts already, so even an idempotent tool waits for a person.
    tools = {
        name: attrs.evolve(spec, idempotent=False, retries=0) if name == intent.tool else spec
        for name, spec in agent.tools.items()
    }
    limits = state.limits or agent.limits or Limits()
    context = RunContext(state, None, tools, agent.gate, limits, agent.token_estimator, run_id=state.run_id)  # type: ignore[arg-type]
    settle_intent(context, attrs.evolve(intent, path=""))
    assert state.pause is not None, "an interrupted call settles as a pause"
    # The kernel's recovery leaves the pause id to the store's commit; here it is the pause's own (deterministic).
    state.pause_id = state.pause.pause_id
    log.intent = log.at_intent = None
    return top
