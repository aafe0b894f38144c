"""
The driver: run a task through the run machine to a typed ending, or resume a paused run.

The guards and effects these functions fire live in
:mod:`agent_fsm.engine.callbacks`; the table they serve is
:data:`agent_fsm.engine.machine.RUN_MACHINE`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm.engine.approval import Seen, approved_judgement
from agent_fsm.engine.callbacks import MACHINE, AnswerCheck, RunContext, judge_proposal
from agent_fsm.engine.checkpoint import Checkpointer, mark_pause
from agent_fsm.engine.consistency import state_problem
from agent_fsm.engine.endings import Ending, EndingRule, code_for
from agent_fsm.engine.failures import NotPaused, StateError
from agent_fsm.engine.gates import Gate
from agent_fsm.engine.limits import Limits, Stop
from agent_fsm.engine.machine import RUN_MACHINE
from agent_fsm.engine.models import Model
from agent_fsm.engine.observe import TokenEstimator, estimate_tokens
from agent_fsm.engine.progress import no_progress_reason
from agent_fsm.engine.state import Judgement, RunResult, RunState
from agent_fsm.engine.tools import Registry, ToolCall

__all__ = ["DEFAULT_SYSTEM_PROMPT", "AnswerCheck", "advance", "resume", "run", "start_state"]

DEFAULT_SYSTEM_PROMPT = (
    "You act only through the tools you are given. Each tool result comes back as JSON with "
    "ok, kind and content. A call that comes back invalid or denied is information: read the "
    "reason and change your proposal, or answer in plain text."
)
"""The system prompt a run starts with when ``system_prompt`` is not given: how tool results read."""


# --- the public driver ---------------------------------------------------------


def _reason(stop: Stop, state: RunState, limits: Limits) -> str | None:
    if stop is Stop.ANSWERED:
        return None
    if stop in (Stop.ANSWER_REJECTED, Stop.AWAITING_APPROVAL):
        return state.judgement.reason if state.judgement is not None else None
    if stop is Stop.PROVIDER_ERROR:
        return state.fault.message if state.fault is not None else None
    # A state handed in may claim an ending its record does not show: say so, never raise.
    last = state.observations[-1].content if state.observations else "(no observation recorded)"
    if stop is Stop.NO_PROGRESS:
        return no_progress_reason(state, limits, last)
    if stop is Stop.STEP_LIMIT:
        return f"{state.turns} of {limits.max_turns} model calls made"
    if stop is Stop.TOKEN_LIMIT:
        return f"the next prompt would exceed {limits.max_prompt_tokens} tokens"
    if stop is Stop.HANDOFF:
        return f"a tool failed permanently: {last if isinstance(last, str) else json.dumps(last)}"
    return f"{state.tool_attempts} of {limits.max_tool_calls} tool attempts made"


def _declared(check: AnswerCheck | None) -> Any:
    """The answer check as the machine calls it: an :class:`Ending` it returns is recorded as the run's code."""
    if check is None:
        return None

    def answer_check(text: str, state: RunState) -> str | None:
        verdict = check(text, state)
        if not isinstance(verdict, Ending):
            return verdict
        state.code = verdict.code
        return None if verdict.accept else verdict.reason or verdict.code

    return answer_check


def _result(state: RunState, limits: Limits, endings: EndingRule | None = None) -> RunResult:
    stop = RUN_MACHINE.stop_of(state.machine_state)
    assert stop is not None, "the driver returned from a working state"
    code = code_for(endings, stop, state)
    if stop is not Stop.AWAITING_APPROVAL and code != stop.value:
        state.code = code  # kept in the state, so a saved run still says how it ended
    return RunResult(
        stop=stop,
        answer=state.answer if stop is Stop.ANSWERED else None,
        state=state,
        blocked_on=state.pending[0] if stop is Stop.AWAITING_APPROVAL else None,
        reason=_reason(stop, state, limits),
        code=code,
    )


def start_state(
    task: str,
    *,
    system_prompt: str | None = None,
    history: Sequence[Mapping[str, Any]] = (),
    estimator: TokenEstimator = estimate_tokens,
) -> RunState:
    """
    A fresh state in ``Ready``: the system prompt (``""`` for none), any earlier
    ``history`` of a conversation, then the task as the newest user message.

    The system prompt is added only when ``history`` has none of its own.
    """
    state = RunState()
    prompt = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
    opening: list[dict[str, Any]] = []
    if prompt and not any(m.get("role") == "system" for m in history):
        opening.append({"role": "system", "content": prompt})
    for message in [*opening, *(dict(m) for m in history), {"role": "user", "content": task}]:
        state.messages.append(message)
        state.message_tokens += estimator(message)
    state.opening = len(state.messages)
    return state


def run(
    task: str,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None = None,
    limits: Limits | None = None,
    system_prompt: str | None = None,
    history: Sequence[Mapping[str, Any]] = (),
    answer_check: AnswerCheck | None = None,
    estimator: TokenEstimator = estimate_tokens,
    endings: EndingRule | None = None,
    store: Checkpointer | None = None,
    run_id: str | None = None,
) -> RunResult:
    """
    Run ``task`` to a typed ending.

    The model only proposes. Each proposal is validated against its tool's
    contract, judged by ``gate`` immediately before execution (``None`` runs
    effect-free tools and refuses effectful ones), executed, and observed;
    budgets in ``limits`` are checked before any work is admitted.
    ``history`` continues a conversation (earlier messages, e.g.
    ``previous.state.messages``); ``answer_check`` may refuse a final answer,
    which then ends the run ``answer_rejected`` instead of ``answered`` (an
    :class:`Ending` it returns also names the world's code); ``endings``
    names the world's code for the engine's stops (``RunResult.code``).
    With ``store`` (e.g. :class:`agent_fsm.store.SqliteStore`) the run is
    committed under ``run_id`` when it begins, around every effectful call
    and whenever it rests (see docs/durability.md).

    Returns:
        A :class:`RunResult`; ``stop`` is absorbing, or ``awaiting_approval``
        (continue with :func:`resume`).

    Raises:
        HandlerError: a handler raised an unexpected exception (``.state`` keeps the run).
        GateError: the gate raised or answered something that is not a verdict.
    """
    state = start_state(task, system_prompt=system_prompt, history=history, estimator=estimator)
    state.limits = limits if limits is not None else Limits()
    if store is not None:
        store.begin(_required_id(run_id), state)
    return advance(
        state,
        model,
        tools,
        gate=gate,
        limits=limits,
        answer_check=answer_check,
        estimator=estimator,
        endings=endings,
        store=store,
        run_id=run_id,
    )


def _required_id(run_id: str | None) -> str:
    if not isinstance(run_id, str) or not run_id:
        raise TypeError(f"a run kept in a store needs a run_id to be found by (a non-empty str, got {run_id!r})")
    return run_id


def _stored_id(store: Checkpointer | None, run_id: str | None) -> str | None:
    return _required_id(run_id) if store is not None else run_id


def _rest(context: RunContext) -> None:
    """The run rests (paused or ended): commit it, a pause under its own id."""
    if context.checkpointer is not None:
        mark_pause(context.state)
        context.checkpointer.save(context.run_id, context.state)


def _trusted_limits(state: RunState, limits: Limits | None) -> Limits:
    """The limits to run under: those passed, else those saved with the run, else the defaults."""
    if limits is not None:
        if not isinstance(limits, Limits):
            raise TypeError(f"'limits' must be a Limits (got {limits!r} that is a {type(limits).__name__}).")
        return limits
    saved = state.limits
    if saved is not None and not isinstance(saved, Limits):
        raise StateError(f"the state's limits are not a Limits: {saved!r}", state=state)
    return saved if saved is not None else Limits()


def _check(state: RunState) -> None:
    if not isinstance(state, RunState):
        raise TypeError(f"'state' must be a RunState (got {type(state).__name__})")
    problem = state_problem(state)
    if problem is not None:
        raise StateError(f"the run state is inconsistent at {problem[0]}: {problem[1]}", state=state)


def advance(
    state: RunState,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None = None,
    limits: Limits | None = None,
    answer_check: AnswerCheck | None = None,
    estimator: TokenEstimator = estimate_tokens,
    endings: EndingRule | None = None,
    store: Checkpointer | None = None,
    run_id: str | None = None,
) -> RunResult:
    """
    Drive ``state`` (modified in place) from where it is until it rests (committed to ``store``).

    ``limits=None`` keeps the limits saved with the run. A run resting in
    ``Proposing`` (one a gate or handler error stopped) has its proposal
    judged again here: a judgement found in a state is never acted on.

    Raises:
        StateError: the state's counters or indices disagree with its transcript.
    """
    _check(state)
    chosen = _trusted_limits(state, limits)
    context = RunContext(
        state, model, tools, gate, chosen, estimator, _declared(answer_check), store, _stored_id(store, run_id)
    )
    if RUN_MACHINE.state(state.machine_state).kind == "working":
        state.limits = chosen
        if state.machine_state == "Proposing":
            judge_proposal(context)
        MACHINE.advance(context)
    result = _result(state, chosen, endings)
    _rest(context)  # after _result, which records the run's code in its state
    return result


def resume(
    state: RunState,
    model: Model,
    tools: Registry,
    *,
    approve: bool,
    gate: Gate | None = None,
    limits: Limits | None = None,
    reason: str = "",
    arguments: Mapping[str, Any] | None = None,
    seen: Seen | None = None,
    answer_check: AnswerCheck | None = None,
    estimator: TokenEstimator = estimate_tokens,
    endings: EndingRule | None = None,
    store: Checkpointer | None = None,
    run_id: str | None = None,
) -> RunResult:
    """
    Continue a run paused in ``awaiting_approval``, once.

    ``approve=True`` judges the blocked call afresh (validated against the
    current ``tools``, the gate consulted again) and the approval turns only
    an ``ask`` about that very call (its fingerprint, recorded with the
    pause) into permission: a ``deny`` still denies, a call that now breaks
    its contract is ``invalid``, and the run's ``max_tool_calls`` still
    holds. ``arguments`` replaces the blocked call's arguments (a reviewer's
    edit); the edited call is validated and gated like a new proposal, and
    the approval covers it. ``approve=False`` turns the call into a
    ``denied`` observation carrying ``reason``. ``limits=None`` keeps the
    limits saved with the run.

    ``state`` is marked consumed (``state.consumed``); the result holds a
    new state. ``seen(pause_id)`` lets an application refuse a second
    decision on the same pause loaded again from the same saved JSON.
    ``store``/``run_id`` commit the run as :func:`run` does; to decide a
    stored pause from any process, use :func:`agent_fsm.store.approve`.

    Raises:
        TypeError: ``approve`` is not a bool.
        NotPaused: ``state`` is not awaiting approval, was resumed already, or ``seen`` says so.
        StateError: the state's counters or indices disagree with its transcript.
    """
    if not isinstance(approve, bool):
        raise TypeError(f"'approve' must be a bool (got {approve!r} that is a {type(approve).__name__}).")
    if arguments is not None and (not approve or not isinstance(arguments, Mapping)):
        raise TypeError("'arguments' replaces the blocked call's arguments: a mapping, and only with approve=True")
    if state.machine_state != "AwaitingApproval":
        raise NotPaused(
            f"only a run awaiting approval can be resumed; this one is in {state.machine_state!r}", state=state
        )
    if state.consumed:
        raise NotPaused("this paused state was resumed already; a pause is decided once", state=state)
    _check(state)
    pause = state.pause
    assert pause is not None, "state_problem checks that a paused state holds its pause"
    chosen = _trusted_limits(state, limits)
    work = copy.deepcopy(state)
    work.pause = None
    work.pause_id = None  # this pause is being decided; a later one gets its own id
    work.limits = chosen
    context = RunContext(
        work, model, tools, gate, chosen, estimator, _declared(answer_check), store, _stored_id(store, run_id)
    )
    if approve:
        _approve(context, pause.fingerprint, arguments)  # may consult the gate; runs nothing yet
    else:
        work.judgement = Judgement("denied", f"rejected by a human reviewer: {reason or 'no reason given'}")
    # Decided from here on: nothing ran before this point, so a failure above leaves the pause open.
    if seen is not None and seen(pause.pause_id):
        raise NotPaused(f"pause {pause.pause_id!r} was decided already; a pause is decided once", state=state)
    state.consumed = True
    # An approval judged afresh to be refused (invalid now, denied, not the
    # call approved, no tool attempts left) leaves the pause as a rejection.
    allowed = approve and work.judgement is not None and work.judgement.kind == "allow"
    MACHINE.fire(context, "approve" if allowed else "reject")
    MACHINE.advance(context)
    result = _result(work, chosen, endings)
    _rest(context)
    return result


def _approve(context: RunContext, covers: str, arguments: Mapping[str, Any] | None) -> None:
    """Judge the blocked call afresh under a human's approval of the call ``covers`` names."""
    from agent_fsm.engine.approval import call_fingerprint

    state = context.state
    call = state.pending[0]
    if arguments is not None:
        edited = dict(arguments)
        call = ToolCall(call.call_id, call.name, edited, json.dumps(edited, default=repr))
        state.pending[0] = call
        covers = call_fingerprint(call)  # the reviewer wrote this call: their approval is of it
    context.authorized = None
    state.judgement = None
    limit = context.limits.max_tool_calls
    if limit is not None and state.tool_attempts >= limit:
        state.judgement = Judgement("denied", f"not run: the tool budget is spent ({state.tool_attempts} of {limit})")
        return
    state.judgement = approved_judgement(call, context.tools, context.gate, covers, state=state)
    if state.judgement.kind == "allow":
        context.authorized = call
