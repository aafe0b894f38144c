"""
How a run is set going and how it comes to rest, shared by the sync and async drivers.

Each public driver function checks its arguments at once, then builds a
:class:`RunContext` and the run's steps here; the sync driver performs the
steps with plain calls, the async driver awaits them. The result, the
reason in words and the commit to a store are made here too, so both
drivers end a run the same way.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm.engine.approval import Seen, approved_judging, call_fingerprint
from agent_fsm.engine.callbacks import MACHINE, AnswerCheck, judge_proposal
from agent_fsm.engine.checkpoint import Checkpointer, mark_pause
from agent_fsm.engine.consistency import state_problem
from agent_fsm.engine.context import RunContext
from agent_fsm.engine.endings import Ending, EndingRule, code_for
from agent_fsm.engine.events import Ended
from agent_fsm.engine.failures import NotPaused, StateError
from agent_fsm.engine.gates import Gate
from agent_fsm.engine.limits import Limits, Stop
from agent_fsm.engine.machine import RUN_MACHINE
from agent_fsm.engine.models import Model
from agent_fsm.engine.observe import TokenEstimator, estimate_tokens
from agent_fsm.engine.progress import no_progress_reason
from agent_fsm.engine.state import Judgement, RunResult, RunState
from agent_fsm.engine.steps import Steps
from agent_fsm.engine.tools import Registry, ToolCall

__all__ = ["DEFAULT_SYSTEM_PROMPT", "continuing", "deciding", "interrupted", "start_state", "starting"]

_DEFAULT_LIMITS = Limits()  # frozen: one shared value for every run given no limits

DEFAULT_SYSTEM_PROMPT = (
    "You act only through the tools you are given. Each tool result comes back as JSON with "
    "ok, kind and content. A call that comes back invalid or denied is information: read the "
    "reason and change your proposal, or answer in plain text."
)
"""The system prompt a run starts with when ``system_prompt`` is not given: how tool results read."""

Launch = tuple[RunContext, Steps[RunResult]]


def _reason(stop: Stop, state: RunState, limits: Limits) -> str | None:
    if stop is Stop.ANSWERED:
        return None
    if stop in (Stop.ANSWER_REJECTED, Stop.AWAITING_APPROVAL):
        return state.judgement.reason if state.judgement is not None else None
    if stop is Stop.PROVIDER_ERROR:
        return state.fault.message if state.fault is not None else None
    if stop is Stop.TIME_LIMIT:
        cut = " (the model call in flight was cut off)" if state.fault is not None else ""
        return f"{state.elapsed:.3f} s of the {limits.max_seconds} s time budget spent{cut}"
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

    def answer_check(text: str, state: RunState) -> Any:
        verdict = check(text, state)
        if hasattr(verdict, "__await__"):
            return _awaited_verdict(verdict, state)
        return _verdict(verdict, state)

    answer_check.__qualname__ = getattr(check, "__qualname__", repr(check))  # named as the user wrote it
    return answer_check


def _verdict(verdict: Any, state: RunState) -> Any:
    if not isinstance(verdict, Ending):
        return verdict
    state.code = verdict.code
    return None if verdict.accept else verdict.reason or verdict.code


class _awaited_verdict:  # used as the function it stands in for
    """An async check's verdict, read when awaited; closing it closes the check's own coroutine (never started)."""

    def __init__(self, pending: Any, state: RunState) -> None:
        self.pending = pending
        self.state = state

    def __await__(self) -> Any:
        return self._settle().__await__()

    async def _settle(self) -> Any:
        return _verdict(await self.pending, self.state)

    def close(self) -> None:
        close = getattr(self.pending, "close", None)
        if callable(close):
            close()


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
    run_id: str | None = None,
) -> RunState:
    """
    A fresh state in ``Ready``: the system prompt (``""`` for none), any earlier
    ``history`` of a conversation, then the task as the newest user message.

    The system prompt is added only when ``history`` has none of its own.
    ``run_id`` names the run (pause ids and idempotency keys derive from it);
    by default it is random.
    """
    state = RunState() if run_id is None else RunState(run_id=run_id)
    prompt = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
    opening: list[dict[str, Any]] = []
    if prompt and not any(m.get("role") == "system" for m in history):
        opening.append({"role": "system", "content": prompt})
    for message in [*opening, *(dict(m) for m in history), {"role": "user", "content": task}]:
        state.messages.append(message)
        state.message_tokens += estimator(message)
    state.opening = len(state.messages)
    return state


def _required_id(run_id: str | None) -> str:
    if not isinstance(run_id, str) or not run_id:
        raise TypeError(f"a run kept in a store needs a run_id to be found by (a non-empty str, got {run_id!r})")
    return run_id


def _stored_id(store: Checkpointer | None, run_id: str | None) -> str | None:
    return _required_id(run_id) if store is not None else run_id


def _trusted_limits(state: RunState, limits: Limits | None) -> Limits:
    """The limits to run under: those passed, else those saved with the run, else the defaults."""
    if limits is not None:
        if not isinstance(limits, Limits):
            raise TypeError(f"'limits' must be a Limits (got {limits!r} that is a {type(limits).__name__}).")
        return limits
    saved = state.limits
    if saved is not None and not isinstance(saved, Limits):
        raise StateError(f"the state's limits are not a Limits: {saved!r}", state=state)
    return saved if saved is not None else _DEFAULT_LIMITS


def _check(state: RunState) -> None:
    if not isinstance(state, RunState):
        raise TypeError(f"'state' must be a RunState (got {type(state).__name__})")
    problem = state_problem(state)
    if problem is not None:
        raise StateError(f"the run state is inconsistent at {problem[0]}: {problem[1]}", state=state)


def _rest(context: RunContext, endings: EndingRule | None) -> RunResult:
    """The run rests (paused or ended): its result, committed (a pause under its own id) and announced."""
    context.settle_clock()
    result = _result(context.state, context.limits, endings)
    if context.checkpointer is not None:
        mark_pause(context.state)
        context.checkpointer.save(context.run_id, context.state)
    if context.outbox is not None:
        context.post(Ended(context.run_id, time.time(), result))
    return result


def interrupted(context: RunContext) -> None:
    """The run was cancelled where it stands (consistent by construction): keep its time, and commit it if stored."""
    context.settle_clock()
    if context.checkpointer is not None:
        context.checkpointer.save(context.run_id, context.state)


def starting(
    task: str,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None,
    limits: Limits | None,
    system_prompt: str | None,
    history: Sequence[Mapping[str, Any]],
    answer_check: AnswerCheck | None,
    estimator: TokenEstimator,
    endings: EndingRule | None,
    store: Checkpointer | None,
    run_id: str | None,
    listening: bool,
) -> Launch:
    """A new run of ``task``: its context and steps (see :func:`agent_fsm.run`)."""
    state = start_state(task, system_prompt=system_prompt, history=history, estimator=estimator, run_id=run_id)
    state.limits = limits if limits is not None else _DEFAULT_LIMITS
    if store is not None:
        store.begin(_required_id(run_id), state)
    return continuing(
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
        listening=listening,
        fresh=True,
    )


def continuing(
    state: RunState,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None,
    limits: Limits | None,
    answer_check: AnswerCheck | None,
    estimator: TokenEstimator,
    endings: EndingRule | None,
    store: Checkpointer | None,
    run_id: str | None,
    listening: bool,
    fresh: bool = False,
) -> Launch:
    """
    ``state`` driven on from where it is (see :func:`agent_fsm.advance`).

    A ``fresh`` state, built just now by :func:`start_state`, is consistent by construction and not checked again.
    """
    if not fresh:
        _check(state)
    chosen = _trusted_limits(state, limits)
    context = _context(state, model, tools, gate, chosen, answer_check, estimator, store, run_id, listening)
    return context, _advancing(context, endings)


def _context(
    state: RunState,
    model: Model,
    tools: Registry,
    gate: Gate | None,
    limits: Limits,
    answer_check: AnswerCheck | None,
    estimator: TokenEstimator,
    store: Checkpointer | None,
    run_id: str | None,
    listening: bool,
) -> RunContext:
    """The run in flight: the answer check as the machine calls it, the run id a store requires."""
    check = _declared(answer_check)
    return RunContext(state, model, tools, gate, limits, estimator, check, store, _stored_id(store, run_id), listening)


def _advancing(context: RunContext, endings: EndingRule | None) -> Steps[RunResult]:
    state = context.state
    if RUN_MACHINE.state(state.machine_state).kind == "working":
        state.limits = context.limits
        if state.machine_state == "Proposing":
            yield from judge_proposal(context)
        yield from MACHINE.steps(context)
    return _rest(context, endings)


def deciding(
    state: RunState,
    model: Model,
    tools: Registry,
    *,
    approve: bool,
    gate: Gate | None,
    limits: Limits | None,
    reason: str,
    arguments: Mapping[str, Any] | None,
    seen: Seen | None,
    answer_check: AnswerCheck | None,
    estimator: TokenEstimator,
    endings: EndingRule | None,
    store: Checkpointer | None,
    run_id: str | None,
    listening: bool,
) -> Launch:
    """A human's decision on a paused ``state`` (see :func:`agent_fsm.resume`); the checks are made at once."""
    if not isinstance(approve, bool):
        raise TypeError(f"'approve' must be a bool (got {approve!r} that is a {type(approve).__name__}).")
    if arguments is not None and (not approve or not isinstance(arguments, Mapping)):
        raise TypeError("'arguments' replaces the blocked call's arguments: a mapping, and only with approve=True")
    _still_paused(state)
    _check(state)
    chosen = _trusted_limits(state, limits)
    work = copy.deepcopy(state)
    work.pause = None
    work.pause_id = None  # this pause is being decided; a later one gets its own id
    work.limits = chosen
    context = _context(work, model, tools, gate, chosen, answer_check, estimator, store, run_id, listening)
    return context, _decided(context, state, approve, reason, arguments, seen, endings)


def _still_paused(state: RunState) -> None:
    if state.machine_state != "AwaitingApproval":
        raise NotPaused(
            f"only a run awaiting approval can be resumed; this one is in {state.machine_state!r}", state=state
        )
    if state.consumed:
        raise NotPaused("this paused state was resumed already; a pause is decided once", state=state)


def _decided(
    context: RunContext,
    state: RunState,
    approve: bool,
    reason: str,
    arguments: Mapping[str, Any] | None,
    seen: Seen | None,
    endings: EndingRule | None,
) -> Steps[RunResult]:
    pause = state.pause
    assert pause is not None, "state_problem checks that a paused state holds its pause"
    work = context.state
    if approve:
        yield from _approve(context, pause.fingerprint, arguments)  # may consult the gate; runs nothing yet
    else:
        work.judgement = Judgement("denied", f"rejected by a human reviewer: {reason or 'no reason given'}")
    # Decided from here on: nothing ran before this point, so a failure above
    # leaves the pause open. Checked again after the gate was awaited: another
    # decision may have taken the pause meanwhile.
    _still_paused(state)
    if seen is not None and seen(pause.pause_id):
        raise NotPaused(f"pause {pause.pause_id!r} was decided already; a pause is decided once", state=state)
    state.consumed = True
    # An approval judged afresh to be refused (invalid now, denied, not the
    # call approved, no tool attempts left) leaves the pause as a rejection.
    allowed = approve and work.judgement is not None and work.judgement.kind == "allow"
    yield from MACHINE.steps(context, "approve" if allowed else "reject")
    return _rest(context, endings)


def _approve(context: RunContext, covers: str, arguments: Mapping[str, Any] | None) -> Steps[None]:
    """Judge the blocked call afresh under a human's approval of the call ``covers`` names."""
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
    state.judgement = yield from approved_judging(call, context.tools, context.gate, covers, state=state)
    if state.judgement.kind == "allow":
        context.authorized = call
