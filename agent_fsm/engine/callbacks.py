"""
The run machine's guards and effects, and the machine compiled from them.

Guards are pure predicates over one run in flight; effects are the on-enter
callbacks that ask the model, judge proposals and cross the effect boundary.
The table they serve is :data:`agent_fsm.engine.machine.RUN_MACHINE`; the
public functions that drive it are in :mod:`agent_fsm.engine.driver`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from agent_fsm.engine.approval import open_pause
from agent_fsm.engine.boundary import judging
from agent_fsm.engine.compiled import compile_machine
from agent_fsm.engine.context import RunContext
from agent_fsm.engine.durable import commit_intent, commit_observation, run_call
from agent_fsm.engine.effects import enter_call, leave_call
from agent_fsm.engine.endings import Ending
from agent_fsm.engine.events import Judged, ModelReplied, ModelRequested, Observed, Paused, Proposed
from agent_fsm.engine.failures import RunError
from agent_fsm.engine.machine import RUN_MACHINE
from agent_fsm.engine.models import ModelReply, not_a_message
from agent_fsm.engine.observe import Observation
from agent_fsm.engine.progress import count_rejection, no_progress
from agent_fsm.engine.state import Judgement, ProviderFault, RunState
from agent_fsm.engine.steps import NotSynchronous, Steps, call_of, model_call
from agent_fsm.engine.tools import ToolCall
from agent_fsm.engine.wire import assistant_text, normalise_reply, tool_message

__all__ = ["MACHINE", "AnswerCheck", "RunContext"]

AnswerCheck = Callable[[str, RunState], "str | Ending | None"]
"""
Judges a final answer before it is accepted: ``None`` accepts, a reason refuses (``answer_rejected``),
an :class:`agent_fsm.Ending` names the world's code as well.
"""


# --- guards: pure predicates over the run -----------------------------------


def time_spent(run: RunContext) -> bool:
    """The run has spent its ``max_seconds`` time budget."""
    limit = run.limits.max_seconds
    return limit is not None and run.elapsed() >= limit


def turn_budget_spent(run: RunContext) -> bool:
    """``max_turns`` model calls were made."""
    return run.state.turns >= run.limits.max_turns


def prompt_over_budget(run: RunContext) -> bool:
    """The next prompt is estimated above ``max_prompt_tokens``."""
    return run.next_prompt_tokens() > run.limits.max_prompt_tokens


def provider_failed(run: RunContext) -> bool:
    """The last model call raised an ``OSError``."""
    return run.state.fault is not None


def answer_refused(run: RunContext) -> bool:
    """The reply was a plain answer and the answer check refused it."""
    return not run.state.pending and run.state.judgement is not None


def reply_has_no_calls(run: RunContext) -> bool:
    """Nothing is pending: the reply was a plain answer."""
    return not run.state.pending


def tool_budget_spent(run: RunContext) -> bool:
    """``max_tool_calls`` handler attempts were made."""
    limit = run.limits.max_tool_calls
    return limit is not None and run.state.tool_attempts >= limit


def call_rejected(run: RunContext) -> bool:
    """The head proposal broke its contract or the gate denied it."""
    judgement = run.state.judgement
    return judgement is not None and judgement.kind in ("invalid", "denied")


def approval_needed(run: RunContext) -> bool:
    """The gate asked for a human's decision."""
    judgement = run.state.judgement
    return judgement is not None and judgement.kind == "ask"


def call_allowed(run: RunContext) -> bool:
    """The head proposal is valid and the gate allowed it."""
    judgement = run.state.judgement
    return judgement is not None and judgement.kind == "allow"


def failed_permanently(run: RunContext) -> bool:
    """The call just executed reported a failure that retrying cannot fix."""
    observations = run.state.observations
    return bool(observations) and observations[-1].permanent


def calls_pending(run: RunContext) -> bool:
    """The current reply has calls not yet judged."""
    return bool(run.state.pending)


def denial_repeated(run: RunContext) -> bool:
    """The rejected proposal came back ``repeated_denials`` times, or two have alternated ``oscillation`` times."""
    return no_progress(run.state, run.limits)


# --- effects: the on-enter callbacks of states --------------------------------


def _ask_model(run: RunContext) -> Steps[None]:
    state = run.state
    estimate = run.next_prompt_tokens()
    state.prompt_token_log.append(estimate)
    state.turns += 1
    if run.outbox is not None:
        run.post(ModelRequested(run.run_id, time.time(), state.turns, estimate, len(state.messages)))
    request = model_call(run)
    try:
        reply = run.perform(request) if run.perform is not None else (yield request)
    except OSError as exc:
        state.fault = ProviderFault(
            type=type(exc).__name__,
            kind=getattr(exc, "kind", "timeout" if isinstance(exc, TimeoutError) else "transport"),
            message=str(exc) or type(exc).__name__,
            status=getattr(exc, "status", None),
        )
        return
    except NotSynchronous:
        _unask(state)  # an async model under the sync driver: it was never asked
        raise
    except Exception as exc:
        raise RunError(f"the model raised {type(exc).__name__}: {exc}", state=state) from exc
    except BaseException:
        _unask(state)
        raise
    state.finish = None
    if type(reply) is not dict:  # a plain dict is the common reply: no other checks for it
        if isinstance(reply, ModelReply):
            counted = reply.prompt_tokens
            if counted is not None and _plausible_count(counted, estimate):
                # The provider counted this prompt: adopt its figure and carry the
                # correction forward so later estimates start from the real size.
                state.usage_offset += counted - estimate
                state.prompt_token_log[-1] = counted
            state.finish = reply.finish
            reply = reply.message
        if not isinstance(reply, Mapping):
            raise RunError(not_a_message(reply), state=state)
    message, calls = normalise_reply(reply, state.turns, run.call_ids)
    run.append(message)
    state.pending = calls
    if run.outbox is not None:
        text = assistant_text(message)
        tokens = state.prompt_token_log[-1]
        run.post(ModelReplied(run.run_id, time.time(), state.turns, tokens, state.finish, len(calls), text))


def _unask(state: RunState) -> None:
    """
    Undo the start of a model call that did not happen, or was cancelled (or interrupted) in flight.

    As if the call was never made: the run rests in Ready and asks again when it goes on.
    """
    state.turns -= 1
    state.prompt_token_log.pop()
    state.machine_state = "Ready"
    state.path.pop()


def _plausible_count(counted: int, estimate: int) -> bool:
    """
    Whether a provider's prompt token count may replace the estimate.

    Rationale: adopting a count moves every later estimate by the difference,
    so a server reporting 0 (or only the few tokens it did not have cached)
    would switch the token budget off. A count below a quarter of the
    estimate is taken as such a report and the estimate stands.
    """
    return counted > 0 and counted * 4 >= estimate


def _not_an_answer(run: RunContext) -> str | None:
    """Why the latest reply, which proposes nothing, cannot be taken as an answer (``None``: it can)."""
    state = run.state
    if state.finish == "length" and not run.limits.accept_truncated:
        return (
            "the reply was cut off at the model's output token limit (finish 'length'), so it is not a "
            "complete answer; raise the provider's max_tokens, or accept it with Limits(accept_truncated=True)"
        )
    if state.finish == "refusal":
        message = state.messages[-1]
        text = message.get("refusal") or assistant_text(message) or "(no text)"
        return f"the model refused (finish 'refusal'): {text}"
    if state.finish == "content_filter":
        return "the provider's content filter withheld the reply (finish 'content_filter')"
    return None


def _cut_off(call: ToolCall) -> Judgement:
    return Judgement(
        "invalid",
        f"the call to {call.name or '(no name)'} was cut off at the model's output token limit "
        f"(finish 'length'), so its arguments may be incomplete; it was not run: {call.raw_arguments!r}",
    )


def take_proposal(run: RunContext) -> Steps[None]:
    """Take the next proposal (asking the model when the reply is used up) and judge it."""
    if not run.state.pending:
        yield from _ask_model(run)
    yield from judge_proposal(run)


def _check_answer(run: RunContext) -> Steps[str | None]:
    """The answer check's reason to refuse the answer; a check that raises or answers garbage is a bug."""
    state = run.state
    text = assistant_text(state.messages[-1]) or ""
    try:
        assert run.answer_check is not None, "judge_proposal asks only when there is a check"
        request = call_of("answer check", run.answer_check, text, state)
        reason = run.perform(request) if run.perform is not None else (yield request)
    except NotSynchronous:
        raise  # an async check under the sync driver: the caller's mistake, not the check's
    except Exception as exc:
        raise RunError(f"the answer check raised {type(exc).__name__}: {exc}", state=state) from exc
    if isinstance(reason, Ending):  # the driver records an Ending's code; its reason refuses
        reason = None if reason.accept else reason.reason or reason.code
    if reason is not None and not isinstance(reason, str):
        raise RunError(f"an answer check must return None, a reason string or an Ending; got {reason!r}", state=state)
    return reason


def judge_proposal(run: RunContext) -> Steps[None]:
    """
    Judge what the model proposed, afresh: the answer check for an answer, the boundary for the head call.

    Also how a run resting in ``Proposing`` (a saved or failed state) goes
    on: whatever judgement it holds is discarded and made again here.
    """
    state = run.state
    state.judgement = None
    run.authorized = None
    if state.fault is not None:
        return
    if not state.pending:
        reason = _not_an_answer(run)
        if reason is None and run.answer_check is not None:
            reason = yield from _check_answer(run)
        if reason is not None:
            state.judgement = Judgement("invalid", reason)
    elif not tool_budget_spent(run):
        call = state.pending[0]
        listening = run.outbox is not None
        if listening:
            run.post(Proposed(run.run_id, time.time(), call.call_id, call.name, call.arguments))
        # A reply cut off at the token limit may end inside a call's arguments
        # that still happen to parse and pass the schema: none of its calls run.
        if state.finish == "length":
            judgement = _cut_off(call)
        else:
            judgement = yield from judging(
                call, run.tools, run.gate, state=state, limits=run.limits, perform=run.perform
            )
        state.judgement = judgement
        if judgement.kind == "allow":
            run.authorized = call
        elif judgement.kind == "ask":
            state.pause = open_pause(state, call, judgement.reason)
            state.pause_id = state.pause.pause_id  # one id for seen=, a store and the inbox
        if listening:
            now = time.time()
            run.post(Judged(run.run_id, now, call.call_id, call.name, judgement.kind, judgement.reason))
            if state.pause is not None and judgement.kind == "ask":
                run.post(Paused(run.run_id, now, state.pause.pause_id, call.call_id, call.name, judgement.reason))


def _observe(run: RunContext, observation: Observation) -> None:
    state = run.state
    state.observations.append(observation)
    run.append(tool_message(observation))
    call = state.pending.pop(0)
    state.judgement = None
    if run.outbox is not None:
        o = observation
        run.post(Observed(run.run_id, time.time(), o.call_id, call.name, o.ok, o.kind, o.content))


def execute_call(run: RunContext) -> Steps[None]:
    """Run the head call's handler: the only place a tool's authority is used."""
    state = run.state
    call = state.pending[0]
    if run.authorized is not call:
        raise RunError(
            f"call {call.call_id!r} reached the effect boundary without a judgement made by this process"
            " (a saved judgement is never authority)",
            state=state,
        )
    run.authorized = None
    checkpointer = run.checkpointer
    # The intent is committed before the handler, always (a run in memory has nowhere to commit it).
    intent = None if checkpointer is None else commit_intent(checkpointer, run.run_id, state, call, run.tools)
    token = enter_call(call.call_id)
    try:
        observation = yield from run_call(call, run.tools, state, run.run_id, run.limits, run.perform)
    finally:
        leave_call(token)
    _observe(run, observation)
    if intent is not None:
        commit_observation(checkpointer, run.run_id, state, intent)


def record_rejection(run: RunContext) -> None:
    """Send the rejection back to the model and count it toward no-progress."""
    state = run.state
    call = state.pending[0]
    judgement = state.judgement
    assert judgement is not None and judgement.kind in ("invalid", "denied")
    count_rejection(state, call.fingerprint())
    _observe(run, Observation(call.call_id, False, judgement.kind, judgement.reason))  # type: ignore[arg-type]


def close_pending(run: RunContext) -> None:
    """
    Answer every call the run stops before judging, as ``denied``.

    A transcript whose assistant message proposes calls that no tool message
    answers is not valid wire history: a provider would refuse it if the
    conversation went on with ``history=``. The calls did not run; saying so
    keeps the record complete.
    """
    state = run.state
    stop = RUN_MACHINE.ending_of(state.machine_state)
    while state.pending:
        call = state.pending[0]
        _observe(run, Observation(call.call_id, False, "denied", f"not run: the run stopped ({stop})"))


def record_answer(run: RunContext) -> None:
    """Keep the answer text of the final assistant message."""
    run.state.answer = assistant_text(run.state.messages[-1]) or ""


MACHINE = compile_machine(
    RUN_MACHINE,
    {
        f.__name__: f
        for f in (
            time_spent,
            turn_budget_spent,
            prompt_over_budget,
            provider_failed,
            answer_refused,
            reply_has_no_calls,
            tool_budget_spent,
            call_rejected,
            approval_needed,
            call_allowed,
            calls_pending,
            failed_permanently,
            denial_repeated,
            take_proposal,
            execute_call,
            record_rejection,
            record_answer,
            close_pending,
        )
    },
)
