"""
The seam: a run set going, brought to rest, decided once, recovered after a crash.

:mod:`~agent_fsm.engine._run` is the loop (the run in flight, the machine's
guards and effects); this module is where a run meets what lies outside
it: a driver starts it (:func:`starting`) or continues a saved one
(:func:`continuing`), the result and its reason are made as it rests
(:func:`_rest`), a person's decision is applied once (:func:`deciding`),
and a run a crash interrupted is settled from its committed intent
(:func:`continue_run`). The sync and async drivers share all of it, so
both end, pause and recover a run the same way.

[launch]
How a run is set going and how it comes to rest, shared by the sync and async drivers.

Each public driver function checks its arguments at once, then builds a
:class:`RunContext` and the run's steps here; the sync driver performs the
steps with plain calls, the async driver awaits them. The result, the
reason in words and the commit to a store are made here too, so both
drivers end a run the same way.


[recovery]
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

import copy
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from agent_fsm.engine import _events as events
from agent_fsm.engine._boundary import (
    Checkpointer,
    Intent,
    Seen,
    approved_judging,
    judge,
    mark_pause,
    open_question,
)
from agent_fsm.engine._endings import Ending, EndingRule, code_for
from agent_fsm.engine._errors import (
    AnswerRefused,
    DecisionRefused,
    GateError,
    HandlerError,
    InvalidTransition,
    NotPaused,
    RunError,
    ScreenError,
    StateError,
    UngatedApproval,
)
from agent_fsm.engine._gates import (
    deny_effects,
    screen_observation,
    screen_task,
)
from agent_fsm.engine._limits import DEFAULT_LIMITS, Limits, Stop
from agent_fsm.engine._machine import RUN_MACHINE
from agent_fsm.engine._messages import (
    Observation,
    Task,
    TokenEstimator,
    estimate_tokens,
    user_content,
)
from agent_fsm.engine._run import (
    MACHINE,
    AnswerCheck,
    RunContext,
    ask_about_unknown,
    judge_proposal,
)
from agent_fsm.engine._run import _observe as observe
from agent_fsm.engine._schema import OutputSpec
from agent_fsm.engine._spending import charge_nested, no_progress_reason
from agent_fsm.engine._state import Judgement, RunResult, RunState, blocked_call, executed_calls, state_problem
from agent_fsm.engine._steps import Steps, drive
from agent_fsm.engine._tools import (
    ASKED,
    NO_ANSWER,
    OpenQuestion,
    PersonAnswers,
    QuestionReply,
    Registry,
    Subrun,
    ToolCall,
    call_fingerprint,
    measure,
    person_tool,
)

if TYPE_CHECKING:
    from agent_fsm.engine._agent import Agent

# --- launch ---


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
    if stop in _WRAPPED and state.path[-2:-1] == ["WrappingUp"]:
        return f"the wrap-up call proposed a call instead of answering (not run); {_WRAPPED[stop](state, limits)}"
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
    if stop in (Stop.REFUSED, Stop.INTERCEPTED):
        screened = state.screens[-1] if state.screens else None
        return (screened.reason or screened.code) if screened is not None else None
    if stop is Stop.TOOL_ENDED:  # the ending result, not the calls of its reply answered after it
        last = next((o.content for o in reversed(state.observations) if o.kind == "result"), last)
        return f"the tool that ends the run returned: {last if isinstance(last, str) else json.dumps(last)}"
    if stop is Stop.COST_LIMIT:
        spent = format(state.usage.cost, "f")
        return f"{spent} of the {limits.max_cost} cost budget spent; the next model call's worst case would pass it"
    if stop is Stop.HANDED_OVER:
        return _handed_reason(state)
    if stop is Stop.HANDOFF:
        return f"a tool failed permanently: {last if isinstance(last, str) else json.dumps(last)}"
    if stop is Stop.CANCELLED:  # who cancelled and why, as the call it waited on was answered
        return last.removeprefix("not run: ") if isinstance(last, str) else json.dumps(last)
    return f"{state.tool_attempts} of {limits.max_tool_calls} tool attempts made"


_WRAPPED: dict[Stop, Callable[[RunState, Limits], str]] = {
    Stop.STEP_LIMIT: lambda state, limits: f"{state.turns} of {limits.max_turns} model calls made",
    Stop.COST_LIMIT: lambda state, limits: (
        f"{format(state.usage.cost, 'f')} of the {limits.max_cost} cost budget spent"
    ),
    Stop.TIME_LIMIT: lambda state, limits: f"{state.elapsed:.3f} s of the {limits.max_seconds} s time budget spent",
    Stop.TOKEN_LIMIT: lambda state, limits: f"the prompt would outgrow {limits.max_prompt_tokens} tokens",
}
"""What a budget that called the wrap-up stands at, when the wrap-up's reply proposed a call (see _reason)."""


def _handed_reason(state: RunState) -> str:
    """Who the run was handed to and how that agent's part ended (the last nested run is the handoff's)."""
    if not state.children:
        return "handed over (no record of the agent it was handed to)"
    child = state.children[next(reversed(state.children))]
    stop = RUN_MACHINE.stop_of(child.machine_state)
    ended = stop.value if stop is not None else child.machine_state
    return f"handed over to {child.agent or 'another agent'}, which ended {child.code or ended}"


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


def _result(
    state: RunState, limits: Limits, endings: EndingRule | None = None, output: OutputSpec | None = None
) -> RunResult:
    stop = RUN_MACHINE.stop_of(state.machine_state)
    assert stop is not None, "the driver returned from a working state"
    code = code_for(endings, stop, state)
    typed = output is not None and stop is Stop.ANSWERED and state.output is not None
    if stop is not Stop.AWAITING_APPROVAL and code != stop._value_:  # the member's value, read without the property
        state.code = code  # kept in the state, so a saved run still says how it ended
    blocked, path = blocked_call(state) if stop is Stop.AWAITING_APPROVAL else (None, ())
    return RunResult(
        stop=stop,
        answer=state.answer if stop is Stop.ANSWERED or stop is Stop.HANDED_OVER else None,
        state=state,
        blocked_on=blocked,
        reason=_reason(stop, state, limits),
        code=code,
        output=_built(output, state) if typed else None,  # type: ignore[arg-type]
        blocked_path=path,
    )


def result_of(agent: Agent, state: RunState) -> RunResult:
    """The result of a run resting in ``state`` (ended or paused), as ``agent`` reports it."""
    return _result(state, _trusted_limits(state, agent.limits), agent.endings, agent.output_spec)


def _built(output: OutputSpec, state: RunState) -> Any:
    """
    The caller's value of the state's output, held to the contract again: a state loaded from elsewhere is data.

    Raises:
        StateError: the saved output does not fit the agent's output contract (edited, or another agent's).
    """
    problems = output.errors(state.output)
    if not problems:
        try:
            return output.build(state.output)
        except Exception as exc:
            problems = [f"{type(exc).__name__}: {exc}"]
    raise StateError(f"the state's output does not fit {output.name}: {'; '.join(problems)[:500]}", state=state)


def start_state(
    task: Task,
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
    by default it is random. A task or a history message may hold images and
    files (:class:`agent_fsm.Image`, :class:`agent_fsm.File`), kept as parts.

    Raises:
        ContentPartError: an image or file that cannot enter the conversation.
    """
    state = RunState() if run_id is None else RunState(run_id=run_id)
    prompt = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
    opening: list[dict[str, Any]] = []
    if prompt and not (history and any(m.get("role") == "system" for m in history)):
        opening.append({"role": "system", "content": prompt})
    earlier = [_with_parts(m) for m in history] if history else []
    for message in [*opening, *earlier, {"role": "user", "content": user_content(task)}]:
        try:
            tokens = estimate_tokens(message) if estimator is estimate_tokens else measure(estimator, message)
        except RunError as exc:
            exc.state = state
            raise
        state.messages.append(message)
        state.message_tokens += tokens
    state.opening = len(state.messages)
    return state


def _with_parts(message: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(message)
    if isinstance(out.get("content"), list):
        out["content"] = user_content(out["content"])
    return out


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
    return saved if saved is not None else DEFAULT_LIMITS


def _check(state: RunState, tools: Registry) -> None:
    if not isinstance(state, RunState):
        raise TypeError(f"'state' must be a RunState (got {type(state).__name__})")
    problem = state_problem(state)
    if problem is None:  # the count of a capped tool's calls, which the state alone cannot tell is kept
        for name, count in executed_calls(state).items():
            spec = tools.get(name)
            if spec is not None and spec.max_calls is not None and state.tool_uses.get(name, 0) < count:
                problem = f"tool_uses.{name}", f"{name} is capped and ran {count} time(s), but none is recorded"
    if problem is not None:
        raise StateError(f"the run state is inconsistent at {problem[0]}: {problem[1]}", state=state)


def _rest(context: RunContext, endings: EndingRule | None) -> RunResult:
    """The run rests (paused or ended): its result, committed (a pause under its own id) and announced."""
    context.settle_clock()
    state = context.state
    if context.agent is not None and state.machine_state == "AwaitingApproval":
        # A pause names the agent that paused it, so whoever decides it can tell a different agent apart.
        state.agent, state.agent_digest = context.agent.name, context.agent.digest
    result = _result(state, context.limits, endings, context.output)
    if context.checkpointer is not None:
        mark_pause(context.state)
        context.checkpointer.save(context.run_id, context.state)
    if context.outbox is not None:
        context.post(events.Ended(context.run_id, time.time(), result))
    return result


def interrupted(context: RunContext) -> None:
    """The run was cancelled where it stands (consistent by construction): keep its time, and commit it if stored."""
    context.settle_clock()
    if context.checkpointer is not None:
        context.checkpointer.save(context.run_id, context.state)


_BUGS = (GateError, HandlerError, ScreenError, InvalidTransition)
"""What stops a run for good: a defect in its gate, a handler, a screen or the machine, not a crash or a refusal."""


def failed(context: RunContext, exc: BaseException) -> None:
    """
    ``exc`` stopped the run: a bug (:data:`_BUGS`) is recorded in its store, the run marked failed.

    Left ``running``, the run would look in flight and :func:`agent_fsm.store.recover`
    would drive it into the same bug. The store keeps the run's last commit;
    the error still reaches the caller, with the state. A checkpointer
    without ``fail`` (only ``begin`` and ``save``) records nothing more.
    """
    record = getattr(context.checkpointer, "fail", None)
    if record is None or not isinstance(exc, _BUGS):
        return
    try:
        record(context.run_id, f"{type(exc).__name__}: {exc}")
    except Exception as problem:  # the bug is what the caller must see; the store's failure is said beside it
        exc.add_note(f"the store could not record run {context.run_id!r} as failed: {problem}")


def starting(
    agent: Agent, state: RunState, *, store: Checkpointer | None, run_id: str | None, listening: bool
) -> Launch:
    """A new run's ``state`` (see :meth:`agent_fsm.Agent.start`), begun in ``store``: its context and steps."""
    if store is not None:
        state.agent_digest = agent.digest  # a stored run is a record: it names its contracts from the start
        store.begin(_required_id(run_id), state)
    return continuing(agent, state, store=store, run_id=run_id, listening=listening, fresh=True)


def continuing(
    agent: Agent,
    state: RunState,
    *,
    store: Checkpointer | None,
    run_id: str | None,
    listening: bool,
    fresh: bool = False,
) -> Launch:
    """
    ``state`` driven on from where it is by ``agent`` (see :meth:`agent_fsm.Agent.advance`).

    A ``fresh`` state, built just now by :func:`start_state`, is consistent by construction and not checked again.
    """
    if not fresh:
        _check(state, agent.tools)
    context = _context(agent, state, _trusted_limits(state, agent.limits), store, run_id, listening)
    return context, _advancing(context, agent.endings)


def _context(
    agent: Agent, state: RunState, limits: Limits, store: Checkpointer | None, run_id: str | None, listening: bool
) -> RunContext:
    """The run in flight: the answer check as the machine calls it, the run id a store requires."""
    check = _declared(agent.answer_check)
    stored_id = _stored_id(store, run_id)
    context = RunContext(
        state, agent.model, agent.tools, agent.gate, limits, agent.token_estimator, check, store, stored_id, listening
    )
    context.equip(agent)
    return context


def _advancing(context: RunContext, endings: EndingRule | None) -> Steps[RunResult]:
    state = context.state
    if RUN_MACHINE.state(state.machine_state).kind == "working":
        state.limits = context.limits
        if state.machine_state == "Compacting":  # stopped inside a compaction: it is made again from Ready
            state.path.pop()
            state.machine_state = "Ready"
        if state.machine_state == "Proposing":
            yield from judge_proposal(context)
        elif state.machine_state in _SCREENING:  # a run resting mid-screen (a screen raised): screened again
            yield from _SCREENING[state.machine_state](context)
        yield from MACHINE.steps(context)
    return _rest(context, endings)


_SCREENING = {"ScreeningInput": screen_task, "ScreeningResult": screen_observation}


def deciding(
    agent: Agent,
    state: RunState,
    approve: bool | None,
    reason: str,
    arguments: Mapping[str, Any] | None,
    seen: Seen | None,
    store: Checkpointer | None,
    run_id: str | None,
    listening: bool,
    answer: Any = NO_ANSWER,
    reply: Mapping[str, CallDecision] | None = None,
) -> Launch:
    """A human's decision on a paused ``state``, judged by ``agent`` (see :meth:`agent_fsm.Agent.resume`)."""
    rest: dict[str, Decision] | None = None
    head: Decision | Mapping[str, CallDecision]
    if reply is not None:
        if approve is not None or arguments is not None or answer is not NO_ANSWER or reason:
            raise TypeError("'reply' decides each call of the reply: give no approve, reason, arguments or answer")
        _still_paused(state)
        _check(state, agent.tools)
        head, rest = _reply_decisions(agent, state, reply)
    else:
        head = _one_decision(approve, reason, arguments, answer)
        _still_paused(state)
        _check(state, agent.tools)
        if head[0]:
            check_answer(agent.tools, state, answer)
    first = next(iter(head.values())) if isinstance(head, Mapping) else CallDecision(*head)  # the innermost call's
    asked = (
        None
        if isinstance(head, Mapping)
        else open_question(agent.tools.get(state.pending[0].name), state.run_id, state, state.pending[0])
    )
    if first.approve and (first.answer is NO_ANSWER or asked is not None):
        refuse_ungated(agent, state)  # before anything is decided: an approval the default gate would refuse
    if asked is not None and not isinstance(head, Mapping):  # the call is open and waits: the decision goes to it
        head = _replying(asked, head, state)
    context = _deciding_context(agent, state, store, run_id, listening)
    return context, _decided(context, state, head, seen, agent.endings, rest)


def _deciding_context(
    agent: Agent, state: RunState, store: Checkpointer | None, run_id: str | None, listening: bool
) -> RunContext:
    """The context a decision on ``state``'s pause runs in: a copy of the state, the pause taken off it."""
    chosen = _trusted_limits(state, agent.limits)
    work = copy.deepcopy(state)
    work.pause = None
    work.pause_id = None  # this pause is being decided; a later one gets its own id
    work.limits = chosen
    return _context(agent, work, chosen, store, run_id, listening)


def cancelling(
    agent: Agent,
    state: RunState,
    by: str,
    reason: str,
    seen: Seen | None,
    store: Checkpointer | None,
    run_id: str | None,
    listening: bool,
) -> Launch:
    """A person's cancel of a paused ``state`` (see :meth:`agent_fsm.Agent.cancel`): the run ends ``cancelled``."""
    if not isinstance(by, str) or not by.strip():
        raise TypeError(f"'by' names who cancels the run (a non-empty str, got {by!r})")
    if not isinstance(reason, str):
        raise TypeError(f"'reason' must be a str (got {reason!r} that is a {type(reason).__name__}).")
    _still_paused(state)
    _check(state, agent.tools)
    context = _deciding_context(agent, state, store, run_id, listening)
    return context, _cancelled(context, state, by, reason, seen, agent.endings)


def _cancelled(
    context: RunContext, state: RunState, by: str, reason: str, seen: Seen | None, endings: EndingRule | None
) -> Steps[RunResult]:
    _still_paused(state)
    pause = state.pause
    assert pause is not None, "state_problem checks that a paused state holds its pause"
    if seen is not None and seen(pause.pause_id):
        raise NotPaused(f"pause {pause.pause_id!r} was decided already; a pause is decided once", state=state)
    state.consumed = True
    work = context.state
    if nested_pause(work):
        yield from _cancel_below(context, by, reason)
    work.judgement = Judgement("denied", f"cancelled by {by}: {reason or 'no reason given'}")
    yield from MACHINE.steps(context, "cancel")
    return _rest(context, endings)


def _cancel_below(context: RunContext, by: str, reason: str) -> Steps[None]:
    """
    The paused run nested in the blocked call ends ``cancelled`` too (and so on down), is charged here, and its
    ending is the call's observation, an ``error`` as any nested run's ending but an answer is.
    """
    work = context.state
    call = work.pending[0]
    inner = _nested_agent(context.tools, call)
    if inner is None:  # not this agent's nesting tool: the nested run stays as it was, its spending charged
        charge_nested(work, work.children[call.call_id])
        return
    child_id = f"{work.run_id}/{call.call_id}"  # the parent commits the whole tree where it rests
    below, steps = cancelling(
        inner, work.children[call.call_id], by, reason, None, None, child_id, context.outbox is not None
    )
    below.outbox, below.relay, below.perform = context.outbox, context.relay, context.perform
    ended = yield from steps
    work.children[call.call_id] = below.state
    charge_nested(work, below.state)
    said = {"agent": inner.name, "stop": ended.stop.value, "code": ended.code, "reason": ended.reason}
    observe(context, Observation(call.call_id, False, "error", said))


Decision = tuple[bool, str, Mapping[str, Any] | None, Any]
"""One decision as the driver applies it: approve, reason, edited arguments, answer (``NO_ANSWER``: none)."""


@attrs.frozen
class CallDecision:
    """
    A person's decision on one call of a reply reviewed whole: approve, approve with edited arguments,
    reject (the model is told ``reason``), or answer (a call to a tool a person answers).

    Made with :meth:`approved`, :meth:`edited`, :meth:`rejected` or :meth:`answered`; given to
    :meth:`agent_fsm.Agent.resume` as ``reply={call_id: decision}``.
    """

    approve: bool = True
    reason: str = ""
    arguments: Mapping[str, Any] | None = None
    answer: Any = NO_ANSWER

    @classmethod
    def approved(cls) -> CallDecision:
        """Run the call as it stands."""
        return cls()

    @classmethod
    def edited(cls, arguments: Mapping[str, Any]) -> CallDecision:
        """Run the call with ``arguments`` instead (validated and gated afresh)."""
        return cls(arguments=arguments)

    @classmethod
    def rejected(cls, reason: str = "") -> CallDecision:
        """Do not run the call; the model is told ``reason``."""
        return cls(approve=False, reason=reason)

    @classmethod
    def answered(cls, answer: Any) -> CallDecision:
        """The call's result, given by the person (checked against the tool's result schema)."""
        return cls(answer=answer)


def reply_of(data: Any) -> dict[str, CallDecision]:
    """
    A reply's decisions from their JSON form: ``{call_id: {"approve": true} | {"arguments": {...}} |
    {"reject": "reason"} | {"answer": VALUE}}``, one key each (what a store records, a CLI or a workflow takes).

    Raises:
        ValueError: the form is not that, saying where.
    """
    if not isinstance(data, Mapping) or not data:
        raise ValueError("a reply's decisions are an object mapping each call id to its decision")
    found: dict[str, CallDecision] = {}
    for call_id, given in data.items():
        if not isinstance(given, Mapping) or len(given) != 1:
            raise ValueError(f"call {call_id!r}: one of approve, arguments, reject or answer")
        ((kind, value),) = given.items()
        if kind == "approve" and value is True:
            found[call_id] = CallDecision.approved()
        elif kind == "arguments" and isinstance(value, Mapping):
            found[call_id] = CallDecision.edited(value)
        elif kind == "reject" and isinstance(value, str):
            found[call_id] = CallDecision.rejected(value)
        elif kind == "answer":
            found[call_id] = CallDecision.answered(value)
        else:
            raise ValueError(f"call {call_id!r}: {kind!r} is not approve (true), arguments, reject (text) or answer")
    return found


def reply_data(reply: Mapping[str, CallDecision]) -> dict[str, dict[str, Any]]:
    """The JSON form of a reply's decisions, as :func:`reply_of` reads it."""

    def said(decision: CallDecision) -> dict[str, Any]:
        if decision.answer is not NO_ANSWER:
            return {"answer": decision.answer}
        if not decision.approve:
            return {"reject": decision.reason}
        return {"approve": True} if decision.arguments is None else {"arguments": dict(decision.arguments)}

    return {call_id: said(decision) for call_id, decision in reply.items()}


def _one_decision(approve: bool | None, reason: str, arguments: Mapping[str, Any] | None, answer: Any) -> Decision:
    if answer is not NO_ANSWER:
        if approve is False or arguments is not None:
            raise TypeError("'answer' is the blocked call's result: give it alone (no approve=False, no arguments)")
        approve = True
    if not isinstance(approve, bool):
        raise TypeError(f"'approve' must be a bool (got {approve!r} that is a {type(approve).__name__}).")
    if arguments is not None and (not approve or not isinstance(arguments, Mapping)):
        raise TypeError("'arguments' replaces the blocked call's arguments: a mapping, and only with approve=True")
    return approve, reason, arguments, answer


def reply_review(agent: Agent, state: RunState) -> list[ToolCall]:
    """
    The calls of the reply a paused ``state`` waits in that need a person, in order.

    The blocked call, then each later call of the same reply that a person
    answers or that the agent's gate asks about, judged now as the run will
    judge it when it reaches the call (so a gate that changes its mind in
    between may run or deny a call decided here: the run follows the gate).
    """
    below = _paused_below(agent, state)
    if below is None:
        return _own_review(agent, state, False)
    return _addressed(state.pending[0].call_id, reply_review(*below)) + _own_review(agent, state, True)


def _own_review(agent: Agent, state: RunState, nested: bool) -> list[ToolCall]:
    """The calls of this run's own reply that need a person: the blocked one (unless ``nested``), then the rest."""
    tools = agent.tools
    gate = agent.gate if agent.gate is not None else deny_effects(tools)
    calls = [] if nested else [state.pending[0]]
    for call in state.pending[1:]:
        kind = judge(call, tools, gate, state=state).kind
        if kind == "ask" or (kind == "allow" and person_tool(tools.get(call.name)) is not None):
            calls.append(call)
    return calls


def _paused_below(agent: Agent, state: RunState) -> tuple[Agent, RunState] | None:
    """The agent and the paused run nested in the call ``state`` is blocked on (``None``: the pause is its own)."""
    inner = _nested_agent(agent.tools, state.pending[0])
    if inner is None or not nested_pause(state):
        return None
    return inner, state.children[state.pending[0].call_id]


def _nested_agent(tools: Registry, call: ToolCall) -> Agent | None:
    """The agent ``call`` runs nested (``None``: its tool is no nesting tool of ``tools``)."""
    spec = tools.get(call.name)
    inner: Agent | None = getattr(spec.handler, "agent", None) if spec and isinstance(spec.handler, Subrun) else None
    return inner


def _addressed(call_id: str, calls: list[ToolCall]) -> list[ToolCall]:
    """A nested run's calls addressed from its parent: ``CALL_ID/`` before each id (as ``blocked_path`` reads)."""
    return [attrs.evolve(call, call_id=f"{call_id}/{call.call_id}") for call in calls]


def check_reply(agent: Agent, state: RunState, reply: Mapping[str, CallDecision]) -> None:
    """Refuse decisions on a paused reply that are partial, extra or wrong, before anything is decided."""
    _reply_decisions(agent, state, reply)


def _reply_decisions(
    agent: Agent, state: RunState, reply: Mapping[str, CallDecision]
) -> tuple[Decision | Mapping[str, CallDecision], dict[str, Decision]]:
    """
    Every call of the reviewed reply decided, each decision checked: the head's, and the rest by call id.

    When the head runs a paused nested run, the head's decision is the nested run's own review (its calls'
    decisions by their ids there), checked by the nested agent, and carried down as a ``reply=`` of its own.
    """
    if not isinstance(reply, Mapping) or not all(isinstance(d, CallDecision) for d in reply.values()):
        raise TypeError("'reply' maps each call id of the reply to a CallDecision")
    below = _paused_below(agent, state)
    inner_calls = reply_review(*below) if below is not None else []
    wanted = _addressed(state.pending[0].call_id, inner_calls) + _own_review(agent, state, bool(below))
    ids = [call.call_id for call in wanted]
    missing, extra = [i for i in ids if i not in reply], [i for i in reply if i not in ids]
    if missing or extra:
        said = [f"undecided: {missing}"] if missing else []
        said += [f"not awaiting a person: {extra}"] if extra else []
        raise DecisionRefused(
            f"a reply is decided whole, each of {ids} once; " + "; ".join(said), "PartialDecision", state=state
        )
    stranded = _asks_midway(agent, state, ids[len(inner_calls) :])
    if stranded is not None:
        raise DecisionRefused(stranded, "MayAskMidCall", state=state)
    decisions: dict[str, Decision] = {}
    for index, call in enumerate(wanted[len(inner_calls) :]):
        given = reply[call.call_id]
        one = _one_decision(given.approve, given.reason, given.arguments, given.answer)
        if one[0] and index == 0 and below is None:
            check_answer(agent.tools, state, one[3])
        elif one[0]:
            _refuse_answer(call, person_tool(agent.tools.get(call.name)), one[3], state)
        decisions[call.call_id] = one
    if below is None:
        return decisions.pop(ids[0]), decisions
    # The nested run's calls go down with the decision on the call that runs it, as a review of its own reply,
    # judged there by the agent whose calls they are.
    inner = {call.call_id: reply[ids[k]] for k, call in enumerate(inner_calls)}
    _reply_decisions(*below, inner)
    return inner, decisions


def reply_strands(agent: Agent, state: RunState) -> str | None:
    """Why the paused reply cannot be reviewed whole, at any level (``None``: it can): see :func:`_asks_midway`."""
    below = _paused_below(agent, state)
    inner = reply_strands(*below) if below is not None else None
    own = [call.call_id for call in _own_review(agent, state, below is not None)]
    return inner or _asks_midway(agent, state, own)


def _asks_midway(agent: Agent, state: RunState, decided: list[str]) -> str | None:
    """
    Why a review whose later decisions a call before them could strand is refused: one whose server may ask.

    Such a call (MCP elicitation) pauses the run on itself, where the rest of the review cannot reach (it is
    held only by this step); the head already asking has its answer in the review, so it goes on.
    """
    calls = state.pending
    last = max((i for i, call in enumerate(calls) if call.call_id in decided), default=0)
    for index, call in enumerate(calls[:last]):
        spec = agent.tools.get(call.name)
        if not getattr(spec.handler if spec else None, "asks_mid_call", False):
            continue
        if index == 0 and open_question(spec, state.run_id, state, call) is not None:
            continue
        later = [c.call_id for c in calls[index + 1 : last + 1] if c.call_id in decided]
        return (
            f"the reply cannot be decided whole: {call.name} ({call.call_id}) may ask a person mid-call (MCP"
            f" elicitation), which would pause the run before {later} are reached; decide the calls one at a time"
        )
    return None


def answered_by(tools: Registry, state: RunState) -> tuple[ToolCall, PersonAnswers | None]:
    """The call a paused ``state`` waits on, down through paused nested runs, and who answers it (``None``: nobody)."""
    call = state.pending[0]
    spec = tools.get(call.name)
    level = state
    child = state.children.get(call.call_id) if state.children else None
    while child is not None and child.machine_state == "AwaitingApproval" and child.pending and spec is not None:
        nested = getattr(spec.handler, "agent", None) if isinstance(spec.handler, Subrun) else None
        if nested is None:
            break
        call, level = child.pending[0], child
        spec = nested.tools.get(call.name)
        child = child.children.get(call.call_id) if child.children else None
    return call, open_question(spec, level.run_id, level, call) or person_tool(spec)


def check_answer(tools: Registry, state: RunState, answer: Any) -> None:
    """
    Refuse an approval of a call a person must answer, and an answer that is not the blocked call's to take.

    Checked before anything is decided: a refused answer leaves the pause open, and the model never sees it.
    """
    call, person = answered_by(tools, state)
    if person is None and answer is not NO_ANSWER and state.pause is not None and ASKED in state.pause.reason:
        effectful = getattr(tools.get(call.name), "effectful", True)
        then = (
            "its outcome is unknown: approve to run it again under the same idempotency key, or reject to record"
            " it as not run"
            if effectful
            else "it is effect-free: approve to call it again (it asks afresh), or reject it"
        )
        raise AnswerRefused(
            f"the call of {call.name} that asked is no longer open here (the run was resumed in another process,"
            f" or after a restart, or the connection closed): {then}",
            [],
            state=state,
        )
    _refuse_answer(call, person, answer, state)


def _refuse_answer(call: ToolCall, person: PersonAnswers | None, answer: Any, state: RunState) -> None:
    if answer is NO_ANSWER:
        if person is not None and not person.approvable:
            raise AnswerRefused(f"{call.name} asks a person for its result: answer it, or reject it", [], state=state)
        return
    if person is None:
        raise AnswerRefused(f"{call.name} is not answered by a person: approve or reject it", [], state=state)
    problems = person.errors(answer)
    if problems:
        raise AnswerRefused(
            f"the answer does not meet the result schema of {call.name}: " + "; ".join(problems), problems, state=state
        )


def refuse_ungated(agent: Agent, state: RunState) -> None:
    """
    Refuse an approval no gate could carry out: an effectful blocked call judged by an agent with no gate.

    With no gate the default refuses every effectful call, and an approval
    only turns a gate's ``ask`` into permission: the approval would end as a
    quiet denial. Checked down a nested pause's path (each call is judged by
    the agent whose tool it is), before anything is decided.

    Raises:
        UngatedApproval: such a call is on the path; the pause stays open.
    """
    paused, judge_with = state, agent
    while paused.pending:
        call = paused.pending[0]
        spec = judge_with.tools.get(call.name)
        if spec is None:  # judged afresh, an unknown tool is an invalid observation: not silent
            return
        if spec.effectful and judge_with.gate is None:
            raise UngatedApproval(
                f"approving the call to {call.name!r} cannot run it: the tool is effectful and the agent deciding"
                " it has no gate, so the default gate refuses it whatever a person approves. Decide with the"
                " gate the run paused under (gate=...), whose ask the approval answers",
                state=state,
            )
        child = paused.children.get(call.call_id) if paused.children else None
        inner = getattr(spec.handler, "agent", None) if isinstance(spec.handler, Subrun) else None
        if child is None or child.machine_state != "AwaitingApproval" or inner is None:
            return
        paused, judge_with = child, inner


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
    decision: Decision | Mapping[str, CallDecision],
    seen: Seen | None,
    endings: EndingRule | None,
    rest: dict[str, Decision] | None = None,
) -> Steps[RunResult]:
    pause = state.pause
    assert pause is not None, "state_problem checks that a paused state holds its pause"
    work = context.state
    nested = yield from _judge_decision(context, pause.fingerprint, decision)
    # Decided from here on: nothing ran before this point, so a failure above
    # leaves the pause open. Checked again after the gate was awaited: another
    # decision may have taken the pause meanwhile.
    _still_paused(state)
    if seen is not None and seen(pause.pause_id):
        raise NotPaused(f"pause {pause.pause_id!r} was decided already; a pause is decided once", state=state)
    state.consumed = True
    # An approval judged afresh to be refused (invalid now, denied, not the
    # call approved, no tool attempts left) leaves the pause as a rejection.
    approved = nested or (not isinstance(decision, Mapping) and decision[0])
    allowed = approved and work.judgement is not None and work.judgement.kind == "allow"
    if nested and not allowed:  # the run it paused stays as it was, never to go on: what it spent is charged
        charge_nested(work, work.children[work.pending[0].call_id])
    yield from _carry_out(context, decision, allowed, nested)
    # The rest of a reply reviewed whole: each call the run pauses on next is decided as the person said,
    # in this same step, and the run is committed once, where it rests after them.
    while rest and work.machine_state == "AwaitingApproval" and work.pending[0].call_id in rest:
        one = rest.pop(work.pending[0].call_id)
        assert work.pause is not None, "a run awaiting approval holds its pause"
        covers, work.pause, work.pause_id = work.pause.fingerprint, None, None
        nested = yield from _judge_decision(context, covers, one)
        allowed = (one[0] or nested) and work.judgement is not None and work.judgement.kind == "allow"
        if nested and not allowed:
            charge_nested(work, work.children[work.pending[0].call_id])
        yield from _carry_out(context, one, allowed, nested)
    return _rest(context, endings)


def _judge_decision(context: RunContext, covers: str, decision: Decision | Mapping[str, CallDecision]) -> Steps[bool]:
    """
    Judge a decision on the call the run waits on afresh (nothing runs yet); whether that call's pause is nested.

    A nested pause's decision goes down as it is: one call's, or (a mapping) the nested run's reply reviewed whole.
    """
    work = context.state
    nested = nested_pause(work)
    if nested:
        # The pause is inside the agent the blocked call runs: this agent's gate judges that call afresh
        # (nobody edits it), and the decision itself goes down to the run that paused, judged there.
        yield from _approve_delegation(context, covers)
        context.decision = decision
        return nested
    assert not isinstance(decision, Mapping), "a reply's decision goes down only to a paused nested run"
    approve, reason, arguments, _ = decision
    if approve:
        yield from _approve(context, covers, arguments)  # may consult the gate; runs nothing yet
    else:
        work.judgement = Judgement("denied", f"rejected by a human reviewer: {reason or 'no reason given'}")
    return nested


def _replying(asked: OpenQuestion, decision: Decision, state: RunState) -> Decision:
    """A decision on an open question as the approval that carries the reply to the call (gated afresh)."""
    approve, reason, arguments, answer = decision
    if arguments is not None:
        raise AnswerRefused(
            "the call is already running: its arguments cannot change; answer, decline or cancel", [], state=state
        )
    kind: Literal["answer", "decline", "cancel"] = (
        "answer" if answer is not NO_ANSWER else "cancel" if approve else "decline"
    )
    return True, reason, None, QuestionReply(asked, kind, None if answer is NO_ANSWER else answer)


def _carry_out(
    context: RunContext, decision: Decision | Mapping[str, CallDecision], allowed: bool, nested: bool
) -> Steps[str]:
    """Take the decision's edge out of the pause (an approval judged afresh to be refused is a rejection)."""
    event = "approve" if allowed else "reject"
    if isinstance(decision, Mapping):  # a nested reply, handed down whole to the paused child
        pass
    elif isinstance(decision[3], QuestionReply):  # the handler, run again, hands the reply over
        decision[3].question.hold(decision[3]) if allowed else decision[3].question.withdraw()
    elif allowed and not nested and decision[3] is not NO_ANSWER:
        context.answer, event = decision[3], "answer"  # checked against the result schema, by this process
    return (yield from MACHINE.steps(context, event))


def nested_pause(state: RunState) -> bool:
    """Whether the call ``state`` is blocked on runs a nested run that is itself paused."""
    child = state.children.get(state.pending[0].call_id) if state.children and state.pending else None
    return child is not None and child.machine_state == "AwaitingApproval"


def _approve_delegation(context: RunContext, covers: str) -> Steps[None]:
    """Judge the call that runs a paused nested run afresh: its attempt was counted when the nested run began."""
    state = context.state
    call = state.pending[0]
    context.authorized = None
    state.judgement = yield from approved_judging(call, context.tools, context.gate, covers, state=state)
    if state.judgement.kind == "allow":
        context.authorized = call


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
        context.approved = True


# --- recovery ---


def _roll_back(state: RunState, intent: Intent) -> None:
    call = state.pending[0] if state.pending else None
    if state.machine_state != "Executing" or call is None or call_fingerprint(call) != intent.fingerprint:
        raise RunError(
            f"the checkpoint does not match its intent: expected the call {intent.call_id!r} ({intent.tool})"
            f" at the head of pending in 'Executing', found {state.machine_state!r} with"
            f" {call.call_id if call else 'nothing'!r} pending",
            state=state,
        )
    # execute_call commits the intent as its first act, so entering Executing is all there is to undo.
    state.path.pop()
    state.machine_state = state.path[-1]


def settle_intent(context: RunContext, intent: Intent) -> None:
    state = context.state
    _roll_back(state, intent)
    call = state.pending[0]
    spec = context.tools.get(call.name)
    came_from = state.machine_state
    reason = ""
    if spec is not None and spec.idempotent:
        if came_from == "AwaitingApproval":
            context.authorized = call  # the store recorded a person's approval of this very call
            context.approved = True
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
    what = f"{call.name} ({call.call_id}) was interrupted after its intent was recorded and before its result was"
    ask_about_unknown(context, call, what, reason)
    if came_from == "Proposing":
        MACHINE.fire(context, "judge")  # the judge edge to AwaitingApproval: the gate's own way to a person


def continue_run(
    agent: Agent, state: RunState, *, store: Checkpointer, run_id: str, intent: Intent | None, on_event: Any = None
) -> RunResult:
    """
    Continue a stored run (``state``, modified in place) by ``agent`` from its last checkpoint until it rests.

    ``intent`` is the effect the checkpoint says was in flight (``None``:
    none was); it is settled as the section says before the run goes on.
    A run already resting is committed as it is and returned. ``on_event``
    hears the run's events, as :meth:`Agent.advance`'s does.

    Raises:
        RunError: the checkpoint and its intent disagree (a store written by something else).
    """
    context, steps = recovering(agent, state, store=store, run_id=run_id, intent=intent, listening=on_event is not None)
    context.relay = on_event
    try:
        return drive(steps, context.outbox, on_event)
    except Exception as exc:
        failed(context, exc)
        raise


def recovering(
    agent: Agent,
    state: RunState,
    *,
    store: Checkpointer | None,
    run_id: str | None,
    intent: Intent | None,
    listening: bool = False,
) -> Launch:
    """:func:`continue_run` as a context and its steps: also how a nested run a crash interrupted goes on."""
    chosen = _trusted_limits(state, agent.limits)  # the run's own limits unless the agent sets its own
    context = _context(agent, state, chosen, store, run_id, listening)
    return context, _recovered(context, intent, agent.endings)


def _recovered(context: RunContext, intent: Intent | None, endings: EndingRule | None) -> Steps[RunResult]:
    state = context.state
    if _nested_in_flight(state):  # interrupted inside a run nested in the head call (or just after it)
        yield from _settle_nested(context, intent)
    elif intent is not None:
        settle_intent(context, intent)
    elif state.machine_state == "AwaitingApproval":
        # Stored as paused but claimed as running: a decision was taken and its process died before the
        # run moved on. The decision did not take effect; the pause opens again, under a new id.
        state.pause_id = None
    if not RUN_MACHINE.state(state.machine_state).is_resting:
        yield from MACHINE.steps(context)
    return _rest(context, endings)


def _nested_in_flight(state: RunState) -> bool:
    return (
        state.machine_state == "Executing"
        and bool(state.pending)
        and bool(state.children)
        and state.pending[0].call_id in state.children
    )


def _settle_nested(context: RunContext, intent: Intent | None) -> Steps[None]:
    """
    Go on with the nested run under the head call: the call that runs it is judged afresh, then the run resumes.

    The nested run settles its own effect in flight (``intent``, a level
    down) by the rules above, with its own gate: nothing runs on the
    strength of the checkpoint alone.
    """
    state = context.state
    call = state.pending[0]
    if intent is not None:
        head, _, below = intent.path.partition("/")
        if head != call.call_id:
            raise RunError(
                f"the checkpoint's intent {intent.call_id!r} lies under call {head!r}, but the run is in"
                f" {call.call_id!r}",
                state=state,
            )
        context.recovering = attrs.evolve(intent, path=below)
    state.path.pop()  # Executing is entered again, by its own edge, once the call is judged
    state.machine_state = state.path[-1]
    if state.machine_state == "AwaitingApproval":  # the store recorded a person's approval of this very call
        context.authorized = call
        context.approved = True
        yield from MACHINE.steps(context, "approve", onward=False)
        return
    yield from judge_proposal(context)  # as any proposal resting in Proposing is: afresh, by this agent's gate
    yield from MACHINE.steps(context, "judge", onward=False)
