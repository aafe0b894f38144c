"""
Continuing a run from its last checkpoint after the process that ran it died.

A checkpoint taken at an intent holds the run in ``Executing`` with the
call at the head of ``pending`` and no observation of it: the handler may
have run, in part or fully, or not at all. Nobody can know, so the rule is:
the step into ``Executing`` is rolled back to the state it was taken from
(``Proposing``, or ``AwaitingApproval`` for an approved call), and then

* an **idempotent** tool the gate still allows is run again, under the same
  idempotency key (the key depends only on the run and the call);
* any other call pauses in ``AwaitingApproval`` with the reason "outcome
  unknown": a person checks the world and approves (it runs again, same
  key) or rejects (it is recorded as not run).

A call is never silently executed twice.
"""

from __future__ import annotations

from agent_fsm.engine.approval import open_pause
from agent_fsm.engine.boundary import judge
from agent_fsm.engine.callbacks import MACHINE, AnswerCheck
from agent_fsm.engine.checkpoint import Checkpointer, Intent, fingerprint, idempotency_key
from agent_fsm.engine.context import RunContext
from agent_fsm.engine.endings import EndingRule
from agent_fsm.engine.failures import RunError
from agent_fsm.engine.gates import Gate
from agent_fsm.engine.launch import _declared, _rest, _trusted_limits
from agent_fsm.engine.limits import Limits
from agent_fsm.engine.machine import RUN_MACHINE
from agent_fsm.engine.models import Model
from agent_fsm.engine.observe import TokenEstimator, estimate_tokens
from agent_fsm.engine.state import Judgement, RunResult, RunState
from agent_fsm.engine.tools import Registry

__all__ = ["OUTCOME_UNKNOWN", "continue_run"]

OUTCOME_UNKNOWN = "outcome unknown"
"""How the reason of a pause for an interrupted, non-idempotent call begins."""


def _roll_back(state: RunState, intent: Intent) -> None:
    call = state.pending[0] if state.pending else None
    if state.machine_state != "Executing" or call is None or fingerprint(call) != intent.fingerprint:
        raise RunError(
            f"the checkpoint does not match its intent: expected the call {intent.call_id!r} ({intent.tool})"
            f" at the head of pending in 'Executing', found {state.machine_state!r} with"
            f" {call.call_id if call else 'nothing'!r} pending",
            state=state,
        )
    # execute_call commits the intent as its first act, so entering Executing is all there is to undo.
    state.path.pop()
    state.machine_state = state.path[-1]


def _settle(context: RunContext, intent: Intent) -> None:
    state = context.state
    _roll_back(state, intent)
    call = state.pending[0]
    spec = context.tools.get(call.name)
    came_from = state.machine_state
    reason = ""
    if spec is not None and spec.idempotent:
        if came_from == "AwaitingApproval":
            context.authorized = call  # the store recorded a person's approval of this very call
            MACHINE.fire(context, "approve")  # run it again, same key
            return
        # The saved judgement is data, not authority: the gate is asked again before anything runs.
        judgement = judge(call, context.tools, context.gate, state=state)
        if judgement.kind == "allow":
            state.judgement = judgement
            context.authorized = call
            MACHINE.fire(context, "judge")
            return
        reason = f"; the gate now answers {judgement.kind}: {judgement.reason}"
    key = idempotency_key(context.run_id, state, call)
    state.judgement = Judgement(
        "ask",
        f"{OUTCOME_UNKNOWN}: {call.name} ({call.call_id}) was interrupted after its intent was recorded and"
        f" before its result was; check whether it took effect (idempotency key {key}), then approve to run it"
        f" again under that key or reject to record it as not run{reason}",
    )
    state.pause = open_pause(state, call, state.judgement.reason)  # what a person's approval will cover
    state.pause_id = state.pause.pause_id  # derived from the run, not drawn at random: the same on every replay
    if came_from == "Proposing":
        MACHINE.fire(context, "judge")  # the judge edge to AwaitingApproval: the gate's own way to a person


def continue_run(
    state: RunState,
    model: Model,
    tools: Registry,
    *,
    store: Checkpointer,
    run_id: str,
    intent: Intent | None,
    gate: Gate | None = None,
    limits: Limits | None = None,
    answer_check: AnswerCheck | None = None,
    estimator: TokenEstimator = estimate_tokens,
    endings: EndingRule | None = None,
) -> RunResult:
    """
    Continue a stored run (``state``, modified in place) from its last checkpoint until it rests again.

    ``intent`` is the effect the checkpoint says was in flight (``None``:
    none was); it is settled as the module says before the run goes on.
    A run already resting is committed as it is and returned.

    Raises:
        RunError: the checkpoint and its intent disagree (a store written by something else).
    """
    chosen = _trusted_limits(state, limits)  # the run's own limits unless new ones are passed
    context = RunContext(state, model, tools, gate, chosen, estimator, _declared(answer_check), store, run_id)
    if intent is not None:
        _settle(context, intent)
    elif state.machine_state == "AwaitingApproval":
        # Stored as paused but claimed as running: a decision was taken and its process died before the
        # run moved on. The decision did not take effect; the pause opens again, under a new id.
        state.pause_id = None
    if not RUN_MACHINE.state(state.machine_state).is_resting:
        MACHINE.advance(context)
    return _rest(context, endings)
