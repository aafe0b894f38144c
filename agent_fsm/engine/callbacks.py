"""
The run machine's guards and effects, and the machine compiled from them.

Guards are pure predicates over one run in flight; effects are the on-enter
callbacks that ask the model, judge proposals and cross the effect boundary.
The table they serve is :data:`agent_fsm.engine.machine.RUN_MACHINE`; the
public functions that drive it are in :mod:`agent_fsm.engine.driver`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent_fsm.engine.approval import open_pause
from agent_fsm.engine.boundary import judge
from agent_fsm.engine.checkpoint import Checkpointer, new_run_id
from agent_fsm.engine.compiled import compile_machine
from agent_fsm.engine.durable import commit_intent, commit_observation, run_call
from agent_fsm.engine.effects import executing
from agent_fsm.engine.endings import Ending
from agent_fsm.engine.failures import RunError
from agent_fsm.engine.gates import Gate, deny_effects
from agent_fsm.engine.limits import Limits
from agent_fsm.engine.machine import RUN_MACHINE
from agent_fsm.engine.models import Model, ModelReply, not_a_message
from agent_fsm.engine.observe import Observation, TokenEstimator
from agent_fsm.engine.progress import count_rejection, no_progress
from agent_fsm.engine.state import Judgement, ProviderFault, RunState
from agent_fsm.engine.tools import Registry, ToolCall, declaration_tokens, function_declarations
from agent_fsm.engine.wire import CallIds, assistant_text, normalise_reply, tool_message

__all__ = ["MACHINE", "AnswerCheck", "RunContext"]

AnswerCheck = Callable[[str, RunState], "str | Ending | None"]
"""
Judges a final answer before it is accepted: ``None`` accepts, a reason refuses (``answer_rejected``),
an :class:`agent_fsm.Ending` names the world's code as well.
"""


class RunContext:
    """One run in flight: its plain-data state plus what it runs against (never saved)."""

    __slots__ = (
        "answer_check",
        "authorized",
        "call_ids",
        "checkpointer",
        "declaration_tokens",
        "declarations",
        "estimator",
        "gate",
        "limits",
        "model",
        "run_id",
        "state",
        "tools",
    )

    def __init__(
        self,
        state: RunState,
        model: Model,
        tools: Registry,
        gate: Gate | None,
        limits: Limits,
        estimator: TokenEstimator,
        answer_check: AnswerCheck | None = None,
        checkpointer: Checkpointer | None = None,
        run_id: str | None = None,
    ) -> None:
        self.state = state
        # Where the run is committed (None: in memory only), and its id, from
        # which every call's idempotency key is derived.
        self.checkpointer = checkpointer
        self.run_id = run_id if run_id is not None else new_run_id()
        self.answer_check = answer_check
        self.model = model
        self.tools = tools
        # Checked and rendered once per registry content, not once per run (see tools.function_declarations).
        self.declarations = function_declarations(tools)
        self.declaration_tokens = declaration_tokens(tools, estimator)
        self.gate = gate if gate is not None else deny_effects(tools)
        self.limits = limits
        self.estimator = estimator
        self.call_ids = CallIds.of(state.messages)  # ids in the transcript; new proposals never reuse one
        # The call this process just judged allowed (or a human approved); never
        # saved, so authority to run a handler cannot come from a saved state.
        self.authorized: ToolCall | None = None

    @property
    def machine_state(self) -> str:
        return self.state.machine_state

    @machine_state.setter
    def machine_state(self, value: str) -> None:
        self.state.machine_state = value
        self.state.path.append(value)

    def measure(self, message: Mapping[str, Any]) -> int:
        """The estimator's count for one message, which must be a whole number >= 0."""
        try:
            tokens = self.estimator(message)
        except Exception as exc:
            raise RunError(f"the token estimator raised {type(exc).__name__}: {exc}", state=self.state) from exc
        if type(tokens) is not int or tokens < 0:
            raise RunError(f"a token estimator must return a whole number >= 0; got {tokens!r}", state=self.state)
        return tokens

    def append(self, message: dict[str, Any]) -> None:
        """Append a message, measuring it once (token accounting stays O(n) over a run)."""
        tokens = self.measure(message)
        self.state.messages.append(message)
        self.state.message_tokens += tokens

    def next_prompt_tokens(self) -> int:
        """Estimated size of the prompt the next model call would send."""
        return self.state.message_tokens + self.declaration_tokens + self.state.usage_offset


# --- guards: pure predicates over the run -----------------------------------


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


def _ask_model(run: RunContext) -> None:
    state = run.state
    estimate = run.next_prompt_tokens()
    state.prompt_token_log.append(estimate)
    state.turns += 1
    try:
        reply = run.model.chat(state.messages, run.declarations)
    except OSError as exc:
        state.fault = ProviderFault(
            type=type(exc).__name__,
            kind=getattr(exc, "kind", "timeout" if isinstance(exc, TimeoutError) else "transport"),
            message=str(exc),
            status=getattr(exc, "status", None),
        )
        return
    except Exception as exc:
        raise RunError(f"the model raised {type(exc).__name__}: {exc}", state=state) from exc
    state.finish = None
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


def take_proposal(run: RunContext) -> None:
    """Take the next proposal (asking the model when the reply is used up) and judge it."""
    if not run.state.pending:
        _ask_model(run)
    judge_proposal(run)


def _check_answer(run: RunContext) -> str | None:
    """The answer check's reason to refuse the answer; a check that raises or answers garbage is a bug."""
    state = run.state
    text = assistant_text(state.messages[-1]) or ""
    try:
        reason = run.answer_check(text, state)  # type: ignore[misc]
    except Exception as exc:
        raise RunError(f"the answer check raised {type(exc).__name__}: {exc}", state=state) from exc
    if isinstance(reason, Ending):  # the driver records an Ending's code; its reason refuses
        reason = None if reason.accept else reason.reason or reason.code
    if reason is not None and not isinstance(reason, str):
        raise RunError(f"an answer check must return None, a reason string or an Ending; got {reason!r}", state=state)
    return reason


def judge_proposal(run: RunContext) -> None:
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
            reason = _check_answer(run)
        if reason is not None:
            state.judgement = Judgement("invalid", reason)
    elif not tool_budget_spent(run):
        call = state.pending[0]
        # A reply cut off at the token limit may end inside a call's arguments
        # that still happen to parse and pass the schema: none of its calls run.
        cut_off = state.finish == "length"
        state.judgement = judgement = (
            _cut_off(call) if cut_off else judge(call, run.tools, run.gate, state=state, limits=run.limits)
        )
        if judgement.kind == "allow":
            run.authorized = call
        elif judgement.kind == "ask":
            state.pause = open_pause(state, call, judgement.reason)
            state.pause_id = state.pause.pause_id  # one id for seen=, a store and the inbox


def _observe(run: RunContext, observation: Observation) -> None:
    state = run.state
    state.observations.append(observation)
    run.append(tool_message(observation))
    state.pending.pop(0)
    state.judgement = None


def execute_call(run: RunContext) -> None:
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
    intent = commit_intent(run.checkpointer, run.run_id, state, call, run.tools)  # before the handler, always
    with executing(call.call_id):
        observation = run_call(call, run.tools, state, run.run_id, run.limits)
    _observe(run, observation)
    commit_observation(run.checkpointer, run.run_id, state, intent)


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
