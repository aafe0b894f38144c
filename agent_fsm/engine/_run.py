"""
The run loop: one run in flight, and the guards and effects of the run machine.

Where a reader starts: :func:`agent_fsm.engine._launch.starting` (a new run)
builds a :class:`RunContext` and hands ``MACHINE.steps(context)`` to a driver; the
machine (:data:`MACHINE`, the table of :mod:`~agent_fsm.engine._machine`
bound to the guards and effects below) then moves the run edge by edge
until it rests, and :mod:`~agent_fsm.engine._launch` gives the result. Guards are pure
predicates; effects are the on-enter callbacks that ask the model, judge
proposals and cross the effect boundary. The sections below, in order:
the context, guards, effects (which guards an agent's options make possible
is :mod:`~agent_fsm.engine._options`; the repeated-denials bookkeeping is
:mod:`~agent_fsm.engine._spending`; how a run is set going, rests, is
decided and recovers is :mod:`~agent_fsm.engine._launch`).

A declaration bound to its guard and effect functions: one ``transitions.Machine`` per process.

:func:`compile_machine` builds the machine once and caches it, then reads
a dispatch table off the machine's own edges (per state, its edges in
table order: guard, destination, the destination's on-enter effects).
Every run is driven through that table and passed as the single argument
guards and effects receive, so a run costs no machine of its own and a
step costs a dictionary look-up and the guards it tries.


[context]
One run in flight: its plain-data state plus what it runs against, which is never saved.

The guards and effects defined below (the run machine's callbacks) receive this
object; the drivers build it once per call and throw it away when the run
rests, so nothing in it can be smuggled in through a saved state.


[callbacks]
The run machine's guards and effects, and the machine compiled from them.

Guards are pure predicates over one run in flight; effects are the on-enter
callbacks that ask the model, judge proposals and cross the effect boundary.
The table they serve is :data:`agent_fsm.engine.RUN_MACHINE`; the
public functions that drive it are in :mod:`agent_fsm.engine._agent`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from agent_fsm.engine import _events as events
from agent_fsm.engine._boundary import (
    OUTCOME_UNKNOWN,
    Checkpointer,
    call_context,
    commit_intent,
    commit_observation,
    early_request,
    enter_call,
    hear_progress,
    idempotency_key,
    judging,
    leave_call,
    open_pause,
    run_call,
    unhear_progress,
)
from agent_fsm.engine._context import Usage, choose_offer, compact_state, refusal, sent_messages, threshold
from agent_fsm.engine._endings import Ending
from agent_fsm.engine._errors import ApprovalNeeded, NotSynchronous, OutcomeUnknown, RunError
from agent_fsm.engine._gates import (
    Gate,
    InputScreen,
    ResultScreen,
    deny_effects,
    result_unscreened,
    screen_observation,
    screen_stopped,
    screen_task,
    task_refused,
    task_unscreened,
)
from agent_fsm.engine._limits import Limits
from agent_fsm.engine._machine import RUN_MACHINE, compile_machine
from agent_fsm.engine._messages import (
    CallIds,
    Observation,
    TokenEstimator,
    assistant_text,
    estimate_tokens,
    invalid_output_message,
    normalise_reply,
    tool_message,
)
from agent_fsm.engine._models import FallbackModel, Model, ModelReply, not_a_message
from agent_fsm.engine._options import ruled_out
from agent_fsm.engine._schema import OUTPUT_INVALID, OutputSpec
from agent_fsm.engine._spending import (
    REPEATED_RESULT,
    WRAP_UP,
    WRAP_UP_NOTE,
    admits,
    cap_refusal,
    charge,
    count_rejection,
    count_result,
    fall_back,
    may_fall_back,
    no_progress,
    over_budget,
    wrap_up_cause,
    wrap_up_fits,
)
from agent_fsm.engine._state import Judgement, ProviderFault, RunState
from agent_fsm.engine._steps import (
    DECLINED,
    Handed,
    Perform,
    Steps,
    answered,
    call_of,
    model_call,
    pause_for,
    together,
)
from agent_fsm.engine._tools import NO_ANSWER, Registry, Subrun, ToolCall, measure, person_tool, shown_to_model

if TYPE_CHECKING:
    from agent_fsm.engine._agent import Agent

__all__ = [
    "AnswerCheck",
    "AnswerCheckFn",
    "LOG",
    "MACHINE",
    "RunContext",
    "ask_about_unknown",
    "judge_proposal",
    "pause_on",
]


# --- context ---

LOG = logging.getLogger("agent_fsm")
"""The library's logger: one DEBUG line per transition, nothing at INFO or above in a run that goes well."""

AnswerCheckFn = Callable[[str, RunState], Any]


class RunContext:
    """One run in flight: its state, its model, tools, gate and budgets, and who listens."""

    __slots__ = (
        "agent",
        "answer",
        "answer_check",
        "approved",
        "authorized",
        "call_ids",
        "checkpointer",
        "clock_start",
        "compact",
        "compact_at",
        "decision",
        "declaration_tokens",
        "declarations",
        "depth",
        "entered",
        "estimator",
        "fallback",
        "gate",
        "handed",
        "limits",
        "model",
        "offer",
        "offered",
        "outbox",
        "output",
        "output_failed",
        "output_value",
        "parallel",
        "perform",
        "prefetched",
        "recovering",
        "relay",
        "repeating",
        "run_id",
        "screen_input",
        "screen_result",
        "sent",
        "state",
        "table",
        "tools",
        "tools_version",
        "usage",
        "where",
        "wrapping",
    )

    def __init__(
        self,
        state: RunState,
        model: Model,
        tools: Registry,
        gate: Gate | None,
        limits: Limits,
        estimator: TokenEstimator,
        answer_check: AnswerCheckFn | None = None,
        checkpointer: Checkpointer | None = None,
        run_id: str | None = None,
        listening: bool = False,
    ) -> None:
        self.state = state
        self.where = state  # the machine moves the state's own machine_state and path (see CompiledMachine)
        # Where the run is committed (None: in memory only), and its id, from
        # which every call's idempotency key is derived.
        self.checkpointer = checkpointer
        self.run_id = run_id if run_id is not None else state.run_id
        self.answer_check = answer_check
        self.agent: Agent | None = None  # the agent driving the run, when an Agent launched it
        # The screens the run's text goes through (None: none; see agent_fsm.engine._gates).
        self.screen_input: InputScreen | None = None
        self.screen_result: ResultScreen | None = None
        # A FallbackModel is asked one model at a time: ``model`` is the one asked next.
        self.fallback = model if isinstance(model, FallbackModel) else None
        self.model = model if self.fallback is None else self.fallback.models[0]
        self.tools = tools
        # A registry that follows a changing list (an MCP server's) has a version (read: brought up to date).
        self.tools_version = getattr(tools, "version", None)
        # Checked and rendered once per registry content, not once per run (see tools.function_declarations).
        try:
            self.declarations, self.declaration_tokens = shown_to_model(tools, estimator)
        except RunError as exc:
            exc.state = state
            raise
        self.gate = gate if gate is not None else deny_effects(tools)
        self.limits = limits
        self.estimator = estimator
        self.call_ids = CallIds.of(state.messages)  # ids in the transcript; new proposals never reuse one
        # The call this process just judged allowed (or a human approved); never
        # saved, so authority to run a handler cannot come from a saved state.
        self.authorized: ToolCall | None = None
        self.approved = False  # the authorized call was approved by a person (its handler's context says so)
        # A person's answer to the authorized call, checked against its result schema by this process; never saved.
        self.answer: Any = NO_ANSWER
        # The call just executed returned the same result Limits.repeated_results times (see count_result).
        self.repeating = False
        # The budget that called the wrap-up call (see wrap_up_cause): a call proposed there ends with its stop.
        self.wrapping: str | None = None
        # Events wait here for the driver to deliver them (None: nobody listens, none is made).
        self.outbox: list[events.RunEvent] | None = [] if listening else None
        # Hears a tool's progress during its call, set by a driver able to deliver it then (else: the outbox).
        self.relay: Callable[[events.RunEvent], Any] | None = None
        # How the run's requests are performed in place; None: they are yielded to the driver
        # (the async driver, or a listener that hears events between them). Set by the sync driver.
        self.perform: Perform | None = None
        debug = LOG.isEnabledFor(logging.DEBUG)
        self.entered: Callable[[str, str, str | None], None] | None = self._entered if listening or debug else None
        # The clock is read only under a time budget.
        self.clock_start = time.monotonic() if limits.max_seconds is not None else None
        # Set by equip(): the compaction, and the tool offer (None: the transcript is the prompt, all tools offered).
        self.compact: Any = None
        self.compact_at: int | None = None
        self.offer: Any = None
        self.sent = None if state.prompt is None else sent_messages(state.messages, state.prompt)
        self.usage: Usage | None = None
        self.offered: frozenset[str] | None = None
        # The dispatch table without the edges this run's configuration rules out (None: the whole table).
        self.table: Any = None
        # Typed output (Agent(output=...)); judged afresh with every answer, never saved:
        # whether the latest answer failed it, and the JSON value it gave when it passed.
        self.output: OutputSpec | None = None
        self.output_failed = False
        self.output_value: Any = None
        # Nesting (agent_fsm.engine._nesting), never saved: a person's decision on a pause inside the call
        # this run executes next (approve, reason, arguments; or a reply's, call id: CallDecision), for the child;
        # the effect a crash left in flight inside that child (the store's intent, a level down);
        # and the call whose handoff just ended, which ends this run.
        self.decision: tuple[bool, str, Mapping[str, Any] | None, Any] | Mapping[str, Any] | None = None
        self.recovering: Any = None
        self.handed: str | None = None
        self.depth = 0  # how many runs this one is nested in (0: the top run)
        # Agent.parallel_calls; and the outcomes of the calls of this reply started
        # early, with the head call (call id: the call and its handler's outcome).
        self.parallel = False
        self.prefetched: dict[str, tuple[ToolCall, tuple[bool, Any]]] | None = None

    def equip(self, agent: Agent) -> None:
        """Take the agent's screens, output, compaction and tool offer; what the run did is read afresh."""
        self.agent = agent
        self.screen_input, self.screen_result = agent.screen_input, agent.screen_result
        self.compact, self.compact_at = agent.compact, agent.compact_at
        self.output = agent.output_spec
        self.parallel = agent.parallel_calls
        if agent.tool_rules or agent.tools_for is not None:
            self.offer, self.usage = agent, Usage.of(self.state)
        self.table = MACHINE.without(ruled_out(agent, self.limits))

    @property
    def machine_state(self) -> str:
        return self.state.machine_state

    @machine_state.setter
    def machine_state(self, value: str) -> None:
        self.state.machine_state = value
        self.state.path.append(value)

    def _entered(self, source: str, event: str, guard: str | None) -> None:
        state = self.state
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "run %s: %s --%s [%s]--> %s (turn %d)",
                self.run_id,
                source,
                event,
                guard or "else",
                state.machine_state,
                state.turns,
            )
        if self.outbox is not None:
            self.outbox.append(
                events.StateEntered(self.run_id, time.time(), state.machine_state, source, event, guard, state.turns)
            )

    def post(self, event: events.RunEvent) -> None:
        """Post ``event`` for the driver to deliver (only called when someone listens)."""
        assert self.outbox is not None
        self.outbox.append(event)

    def delta_sink(self, live: Callable[[events.RunEvent], Any] | None) -> Callable[[str], None]:
        """What a streaming model calls with each text fragment under the sync driver."""
        turn = self.state.turns

        def on_delta(text: str) -> None:
            event = events.TextDelta(self.run_id, time.time(), turn, text)
            if live is not None:
                live(event)
            else:
                self.post(event)

        return on_delta

    def adelta_sink(self, deliver: Callable[[events.RunEvent], Awaitable[None]]) -> Callable[[str], Awaitable[None]]:
        """What a streaming model awaits with each text fragment under the async driver."""
        turn = self.state.turns

        async def on_delta(text: str) -> None:
            await deliver(events.TextDelta(self.run_id, time.time(), turn, text))

        return on_delta

    def follow_tools(self) -> None:
        """Render the tools again if the registry's version moved, as each call is observed: before the budget check."""
        version = getattr(self.tools, "version", None)
        if version == self.tools_version:
            return
        try:
            self.declarations, self.declaration_tokens = shown_to_model(self.tools, self.estimator)
        except RunError as exc:
            exc.state = self.state
            raise
        self.tools_version = version

    def progress_sink(self, call: ToolCall) -> Callable[[float, float | None, str | None], None]:
        """What hears the progress ``call``'s handler reports (see :func:`agent_fsm.report_progress`)."""

        def report(progress: float, total: float | None, message: str | None) -> None:
            event = events.ToolProgress(self.run_id, time.time(), call.call_id, call.name, progress, total, message)
            relay = self.relay
            if relay is not None:
                try:
                    relay(event)
                    return
                except Exception:  # a listener's failure is not the tool's: the driver hears it after the call
                    self.relay = None
            self.post(event)

        return report

    def elapsed(self) -> float:
        """Seconds this run has spent in drivers under its time budget, this call included."""
        if self.clock_start is None:
            return self.state.elapsed
        return self.state.elapsed + (time.monotonic() - self.clock_start)

    def remaining_seconds(self) -> float | None:
        """Seconds left in the time budget (``None``: no time budget)."""
        limit = self.limits.max_seconds
        return None if limit is None else limit - self.elapsed()

    def settle_clock(self) -> None:
        """Record the time spent so far in the state, as the run rests or is interrupted."""
        if self.clock_start is not None:
            now = time.monotonic()
            self.state.elapsed += now - self.clock_start
            self.clock_start = now

    def append(self, message: dict[str, Any]) -> None:
        """
        Append a message, measuring it once (token accounting stays O(n) over a run).

        The estimator's count must be a whole number >= 0; one that raises or
        answers anything else is a bug, reported with the run's state.
        """
        estimator = self.estimator
        try:  # the engine's own estimator answers whole numbers: only another's count is checked
            tokens = estimate_tokens(message) if estimator is estimate_tokens else measure(estimator, message)
        except RunError as exc:
            exc.state = self.state
            raise
        state = self.state
        state.messages.append(message)
        state.message_tokens += tokens
        if state.prompt is not None:  # a compacted prompt: the new message joins it too
            state.prompt.append(len(state.messages) - 1)
            self.sent.append(message)  # type: ignore[union-attr]

    def messages_to_send(self) -> list[dict[str, Any]]:
        """The prompt's messages: the transcript, or its compacted form."""
        return self.state.messages if self.sent is None else self.sent

    def next_prompt_tokens(self) -> int:
        """Estimated size of the prompt the next model call would send."""
        return self.state.message_tokens + self.declaration_tokens + self.state.usage_offset

    # A summary's model call is spent through the run (see compact_state): checked, then charged.
    def admits(self, model: Any, prompt_tokens: int) -> bool:
        """Whether a call to ``model`` of ``prompt_tokens`` fits ``max_cost`` at its worst case."""
        return admits(self, model, prompt_tokens)

    def charge_call(self, model: Any, reply: ModelReply | None, estimate: int, measured: int) -> None:
        """Add a call to ``model`` (not the run's own) to the run's usage."""
        charge(self, reply, estimate, measured, model)


# --- callbacks ---

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


def last_turn_due(run: RunContext) -> bool:
    """Wrap-up is asked for, a budget admits exactly one more model call (see wrap_up_cause), and that call fits."""
    return run.limits.wrap_up and wrap_up_cause(run) is not None and wrap_up_fits(run)


def wrapped_for_cost(run: RunContext) -> bool:
    """The wrap-up the money left called proposed a call all the same."""
    return bool(run.state.pending) and run.wrapping == "cost_limit"


def turn_budget_spent(run: RunContext) -> bool:
    """``max_turns`` model calls were made."""
    return run.state.turns >= run.limits.max_turns


def prompt_over_budget(run: RunContext) -> bool:
    """The next prompt is estimated above ``max_prompt_tokens``."""
    return run.next_prompt_tokens() > run.limits.max_prompt_tokens


def compaction_due(run: RunContext) -> bool:
    """The agent compacts and the next prompt passes ``compact_at`` (or ``max_prompt_tokens``)."""
    return run.compact is not None and run.next_prompt_tokens() > threshold(run.limits, run.compact_at)


def cost_over_budget(run: RunContext) -> bool:
    """The next model call's worst case (the prompt estimate in, ``max_output_tokens`` out) would pass ``max_cost``."""
    return run.limits.max_cost is not None and over_budget(run, run.model)


def can_fall_back(run: RunContext) -> bool:
    """The call failed with a kind its FallbackModel lists, another model is left, and the budgets admit it."""
    return run.fallback is not None and may_fall_back(run)


def provider_failed(run: RunContext) -> bool:
    """The last model call raised an ``OSError``."""
    return run.state.fault is not None


def output_retry_left(run: RunContext) -> bool:
    """The answer is not valid typed output and ``Limits.output_retries`` still allows sending it back."""
    return run.output_failed and run.state.output_rejections < run.limits.output_retries


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


def tool_cap_reached(run: RunContext) -> bool:
    """The head proposal was refused because its tool already ran ``max_calls`` times in this run."""
    judgement = run.state.judgement
    return judgement is not None and judgement.kind == "denied" and cap_refusal(run, run.state.pending[0]) is not None


def call_rejected(run: RunContext) -> bool:
    """The head proposal broke its contract or the gate denied it."""
    judgement = run.state.judgement
    return judgement is not None and judgement.kind in ("invalid", "denied")


def approval_needed(run: RunContext) -> bool:
    """The gate asked for a human's decision."""
    judgement = run.state.judgement
    return judgement is not None and judgement.kind == "ask"


def answer_needed(run: RunContext) -> bool:
    """The gate allowed the head call, and a person gives its result."""
    judgement = run.state.judgement
    if judgement is None or judgement.kind != "allow":
        return False
    return person_tool(run.tools.get(run.state.pending[0].name)) is not None


def answer_given(run: RunContext) -> bool:
    """A person's answer to the head call was checked against its result schema by this process."""
    return run.answer is not NO_ANSWER


def call_allowed(run: RunContext) -> bool:
    """The head proposal is valid and the gate allowed it."""
    judgement = run.state.judgement
    return judgement is not None and judgement.kind == "allow"


def failed_permanently(run: RunContext) -> bool:
    """The call just executed reported a failure that retrying cannot fix."""
    observations = run.state.observations
    return bool(observations) and observations[-1].permanent


def ended_by_tool(run: RunContext) -> bool:
    """The call just executed was to a tool that ends the run, and it returned a result."""
    return run.usage is not None and run.usage.last_ok and run.usage.last in run.offer.ending_tools


def handed_over(run: RunContext) -> bool:
    """The call just executed handed the conversation to another agent, and that agent's part has ended."""
    return run.handed is not None


def calls_pending(run: RunContext) -> bool:
    """The current reply has calls not yet judged."""
    return bool(run.state.pending)


def result_repeated(run: RunContext) -> bool:
    """The call just executed returned the same result ``repeated_results`` times in this run."""
    return run.repeating


def denial_repeated(run: RunContext) -> bool:
    """The rejected proposal came back ``repeated_denials`` times, or two have alternated ``oscillation`` times."""
    return no_progress(run.state, run.limits)


# --- effects: the on-enter callbacks of states --------------------------------


def compact_prompt(run: RunContext) -> Steps[None]:
    """Shrink the prompt by the agent's compaction (the transcript keeps everything), checked and recorded."""
    state = run.state
    spare = run.declaration_tokens + state.usage_offset
    record = yield from compact_state(
        state, run.compact, run.compact_at, run.limits, spare, run.estimator, run.perform, run
    )
    if isinstance(record, tuple):  # the summarizer's reply could not be had: its kind of failure, and why
        kind, message = record
        state.fault = ProviderFault(type="ProviderFailure", kind=kind, message=message)
        return
    run.sent = sent_messages(state.messages, state.prompt or ())
    if run.outbox is not None:
        run.post(events.Compacted.of(run.run_id, time.time(), record))


def _offer_tools(run: RunContext) -> None:
    """Decide which tools this model call offers (``tools_for``, then the rules) and declare only those."""
    agent, state = run.offer, run.state
    assert run.usage is not None
    run.offered = frozenset(choose_offer(run.tools, agent.tools_for, agent.tool_rules, run.usage, state))
    run.declarations = shown_to_model({n: t for n, t in run.tools.items() if n in run.offered}, run.estimator)[0]
    if run.outbox is not None:
        run.post(events.ToolsOffered(run.run_id, time.time(), state.turns, sorted(run.offered)))


def _ask_model(run: RunContext) -> Steps[None]:
    state = run.state
    run.prefetched = None  # a new reply: what the last one started early and never used is dropped
    if run.fallback is not None:  # the model of the chain this attempt is for (a saved count is clamped)
        run.model = run.fallback.models[min(state.model_attempt, len(run.fallback.models) - 1)]
    estimate = run.next_prompt_tokens()
    state.prompt_token_log.append(estimate)
    state.turns += 1
    if run.offer is not None:
        _offer_tools(run)
    if run.outbox is not None:
        run.post(events.ModelRequested(run.run_id, time.time(), state.turns, estimate, len(state.messages)))
    limit = getattr(run.model, "rate_limit", None)
    reserved = 0
    if limit is not None:  # the model's rate limit, shared with every run that uses it: wait for a slot
        reserved = estimate + (run.limits.max_output_tokens or 0)
        try:
            admitted = yield from _wait_for_rate(run, limit.reserve(reserved))
        except BaseException:
            _unask(state)  # cancelled while waiting: the call was never made
            raise
        if not admitted:
            return
    request = model_call(run)
    try:
        reply = run.perform(request) if run.perform is not None else (yield request)
        if type(reply) is Handed:  # the performer left it to the driver
            reply = yield reply or request
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
    reported: ModelReply | None = None
    if type(reply) is not dict:  # a plain dict is the common reply: no other checks for it
        if isinstance(reply, ModelReply):
            problem = reply.problem()
            if problem is not None:  # checked where it enters: taken, it could leave the state unsaveable
                state.fault = ProviderFault(type="ProviderFailure", kind="bad_response", message=problem)
                return
            reported = reply
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
    before = state.message_tokens
    run.append(message)
    state.pending = calls
    measured = state.message_tokens - before
    if run.outbox is not None:
        text = assistant_text(message)
        tokens = state.prompt_token_log[-1]
        run.post(events.ModelReplied(run.run_id, time.time(), state.turns, tokens, state.finish, len(calls), text))
    if limit is not None:  # what the call used beyond its reservation is charged to the bucket
        limit.charge(state.prompt_token_log[-1] + measured - reserved)
    agent, limits = run.agent, run.limits
    if reported is None and run.outbox is None and limits.max_cost is None and (agent is None or agent.prices is None):
        usage = state.usage  # nothing reported, priced or heard: the estimates counted in place
        usage.input_tokens += estimate
        cap = limits.max_output_tokens
        usage.output_tokens += measured if cap is None or measured <= cap else cap
        state.model_attempt = 0  # a reply: the next turn starts from a chain's primary
    else:
        charge(run, reported, estimate, measured)  # after the reply is announced: the Charged event follows it


def _wait_for_rate(run: RunContext, seconds: float) -> Steps[bool]:
    """
    Wait ``seconds`` for the model's rate limit (an event, spent from the time budget); ``False``: no call.

    A wait that would pass the time budget is not made whole: the run waits
    out what is left, and the model call is recorded as cut off, so the run
    ends ``time_limit`` (the machine's first judgement after a model call).
    """
    if seconds <= 0:
        return True
    state = run.state
    remaining = run.remaining_seconds()
    cut = remaining is not None and seconds > remaining
    # A cut wait lasts a little past the budget's end, so the clock read after it has surely passed it.
    waited = max(remaining, 0.0) + 0.005 if cut and remaining is not None else seconds
    if run.outbox is not None:
        run.post(events.RateWaited(run.run_id, time.time(), state.turns, waited, cut))
    request = pause_for(waited, shielded=False)
    handed = DECLINED if run.perform is None else run.perform(request)
    if type(handed) is Handed:
        yield handed or request
    if cut:
        message = f"the model's rate limit asked for a wait of {seconds:.3f} s, past the time budget"
        state.fault = ProviderFault(type="RateLimitWait", kind="timeout", message=message)
    return not cut


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


def ask_last_word(run: RunContext) -> Steps[None]:
    """The wrap-up call: the model, told the budget is spent, is offered no tools; a plain answer is judged."""
    state = run.state
    run.wrapping = wrap_up_cause(run)
    run.append({"role": "user", "content": WRAP_UP_NOTE})
    run.offer, run.declarations, run.declaration_tokens = None, [], 0
    yield from _ask_model(run)
    if state.fault is None and not state.pending:
        yield from judge_proposal(run)
        if state.judgement is None:
            state.code = WRAP_UP


def take_proposal(run: RunContext) -> Steps[None]:
    """Take the next proposal (asking the model when the reply is used up, the next of a chain after a failure)."""
    state = run.state
    if state.fault is not None:  # entered again by can_fall_back: the next model of the chain is asked
        fall_back(run)
    if not state.pending:
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
        if type(reason) is Handed:
            reason = yield reason or request
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
        run.output_failed = False
        if reason is None and run.output is not None:
            run.output_value, reason = run.output.read(assistant_text(state.messages[-1]) or "", run.limits)
            run.output_failed = reason is not None
        if reason is None and run.answer_check is not None:
            reason = yield from _check_answer(run)
        if reason is not None:
            state.judgement = Judgement("invalid", reason)
    elif run.limits.max_tool_calls is None or not tool_budget_spent(run):  # no tool budget: none to spend
        call = state.pending[0]
        listening = run.outbox is not None
        if listening:
            run.post(events.Proposed(run.run_id, time.time(), call.call_id, call.name, call.arguments))
        # A reply cut off at the token limit may end inside a call's arguments
        # that still happen to parse and pass the schema: none of its calls run.
        spec = run.tools.get(call.name)
        capped = None if spec is None or spec.max_calls is None else cap_refusal(run, call)
        if state.finish == "length":
            judgement = _cut_off(call)
        elif run.offer is not None and (refused := _not_offered(run, call)) is not None:
            judgement = Judgement("invalid", refused)
        elif capped is not None:
            judgement = Judgement("denied", capped)
        else:
            judgement = yield from judging(
                call, run.tools, run.gate, state=state, limits=run.limits, perform=run.perform
            )
        state.judgement = judgement
        asked = judgement.reason
        if judgement.kind == "allow" and spec is not None and person_tool(spec) is not None:
            asked = f"{call.name} asks a person for its result"  # allowed: the person's answer is the call's effect
            state.pause = open_pause(state, call, asked)
            state.pause_id = state.pause.pause_id
        elif judgement.kind == "allow":
            run.authorized = call
        elif judgement.kind == "ask":
            state.pause = open_pause(state, call, judgement.reason)
            state.pause_id = state.pause.pause_id  # one id for seen=, a store and the inbox
        if listening:
            now = time.time()
            run.post(events.Judged(run.run_id, now, call.call_id, call.name, judgement.kind, judgement.reason))
            if state.pause is not None:
                run.post(events.Paused(run.run_id, now, state.pause.pause_id, call.call_id, call.name, asked))


def _not_offered(run: RunContext, call: ToolCall) -> str | None:
    """Why a call is refused as not offered this turn (``None``: it was offered, and the rules still allow it)."""
    if run.offered is None:  # this process did not ask: the offer is decided afresh, never read from the state
        _offer_tools(run)
    assert run.usage is not None and run.offered is not None
    return refusal(call.name, run.offered, run.offer.tool_rules, run.usage, run.tools)


def _observe(run: RunContext, observation: Observation) -> None:
    state = run.state
    state.observations.append(observation)
    run.append(tool_message(observation))
    call = state.pending.pop(0)
    state.judgement = None
    if run.usage is not None:
        run.usage.observe(call.name, observation.kind)
    if run.outbox is not None:
        o = observation
        run.post(events.Observed(run.run_id, time.time(), o.call_id, call.name, o.ok, o.kind, o.content))
    run.follow_tools()


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
    approved, run.approved = run.approved, False
    handler = run.tools[call.name].handler
    if isinstance(handler, Subrun):  # another agent's run: its own effects cross their own boundaries
        observation = yield from handler.steps(run, call)
        if observation is not None:  # None: the child paused, and this run with it (see pause_on)
            _record_use(run, call)
            _observe(run, observation)
            count_result(run, call, observation)
        return
    checkpointer = run.checkpointer
    # The intent is committed before the handler, always (a run in memory has nowhere to commit it).
    intent = None if checkpointer is None else commit_intent(checkpointer, run.run_id, state, call, run.tools)
    early = run.prefetched.pop(call.call_id, None) if run.prefetched else None
    if early is None and not approved and len(state.pending) > 1 and _runs_together(run, call):
        yield from _start_together(run)
        early = run.prefetched.pop(call.call_id, None) if run.prefetched else None
    perform = run.perform
    if early is not None and early[0] is call and not approved:  # started early, for this very call
        perform = answered(early[1], perform)
    token = enter_call(call.call_id)
    heard = hear_progress(run.progress_sink(call)) if run.outbox is not None else None
    try:
        observation = yield from run_call(call, run.tools, state, run.run_id, run.limits, perform, approved)
    except OutcomeUnknown as exc:
        # The effect may have happened: nothing is recorded as done or not done; a person decides.
        ask_about_unknown(run, call, f"{exc}", "")
        return
    except ApprovalNeeded as exc:
        # The tool asks before its effect: the run pauses on the call as if the gate had asked.
        pause_on(run, call, exc.reason or f"{call.name} asks for a person's approval")
        return
    finally:
        if heard is not None:
            unhear_progress(heard)
        leave_call(token)
    _record_use(run, call)
    _observe(run, observation)
    count_result(run, call, observation)
    if intent is not None:
        commit_observation(checkpointer, run.run_id, state, intent)


def _runs_together(run: RunContext, call: ToolCall) -> bool:
    """Whether ``call`` may overlap its neighbours: an effect-free tool that the agent or the tool opted in."""
    spec = run.tools.get(call.name)
    return (
        spec is not None
        and (run.parallel or spec.parallel)
        and not spec.effectful
        and not isinstance(spec.handler, Subrun)
    )


def _start_together(run: RunContext) -> Steps[None]:
    """
    Start the head call's handler together with those of the effect-free calls right behind it.

    Rationale: only the waiting overlaps. The machine still takes every call
    at its turn, in order: judged again there, counted against the budgets
    and caps, observed; a call started early is used only if that judgement
    allows it (its result is dropped otherwise), so the run's state is the
    one running them one by one would give. A call joins only if the gate
    allows it now: no handler runs that the gate has not allowed. The first
    effectful call (or one that is not allowed now) ends the batch, since
    what follows it may depend on its effect.
    """
    state = run.state
    batch = [state.pending[0]]
    for call in state.pending[1:]:
        if not _runs_together(run, call) or (run.offer is not None and _not_offered(run, call) is not None):
            break
        judgement = yield from judging(call, run.tools, run.gate, state=state, limits=run.limits, perform=run.perform)
        if judgement.kind != "allow":
            break
        batch.append(call)
    if len(batch) < 2:
        return
    requests = []
    for ahead, call in enumerate(batch):
        spec = run.tools[call.name]
        context = call_context(spec.takes_context, run.run_id, state, call, False, ahead)
        sink = run.progress_sink(call) if run.outbox is not None else None
        requests.append(early_request(call, run.tools, context, sink))
    request = together(requests)
    outcomes = run.perform(request) if run.perform is not None else (yield request)
    if type(outcomes) is Handed:
        outcomes = yield outcomes or request
    run.prefetched = {call.call_id: (call, outcome) for call, outcome in zip(batch, outcomes, strict=True)}


def take_answer(run: RunContext) -> None:
    """Record a person's answer, checked against the result schema by this process, as the head call's result."""
    state = run.state
    call = state.pending[0]
    answer, run.answer = run.answer, NO_ANSWER
    if run.authorized is not call or answer is NO_ANSWER:
        raise RunError(f"call {call.call_id!r} was answered without a decision made by this process", state=state)
    run.authorized = None
    state.tool_attempts += 1  # the person did the call's work: it counts as the call's one attempt
    _record_use(run, call)
    _observe(run, Observation(call.call_id, True, "result", answer))


def _record_use(run: RunContext, call: ToolCall) -> None:
    if run.tools[call.name].max_calls is not None:
        uses = run.state.tool_uses
        uses[call.name] = uses.get(call.name, 0) + 1


def record_rejection(run: RunContext) -> None:
    """Send the rejection back to the model and count it toward no-progress."""
    state = run.state
    call = state.pending[0]
    judgement = state.judgement
    assert judgement is not None and judgement.kind in ("invalid", "denied")
    count_rejection(state, call.fingerprint())
    _observe(run, Observation(call.call_id, False, judgement.kind, judgement.reason))  # type: ignore[arg-type]


def name_repeat(run: RunContext) -> None:
    """A run that ends on a repeated result says so by its code, so callers tell it from repeated refusals."""
    if run.repeating:
        run.state.code = REPEATED_RESULT


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
    """Keep the answer text of the final assistant message (and, once accepted, its typed output)."""
    state = run.state
    state.answer = assistant_text(state.messages[-1]) or ""
    if run.output is not None:
        if state.machine_state == "Answered":
            state.output = run.output_value
        elif run.output_failed and state.code is None:
            state.code = OUTPUT_INVALID  # the retries ran out; the reason names what failed last


def record_handover(run: RunContext) -> None:
    """The run ends as the agent it handed over to ended: its answer, if it gave one, and its code."""
    state = run.state
    assert run.handed is not None, "handed_over holds only with the handoff's call named"
    child = state.children[run.handed]
    stop = RUN_MACHINE.stop_of(child.machine_state)
    state.answer = child.answer if child.machine_state == "Answered" else None
    state.code = child.code or (stop.value if stop is not None else None)


def return_invalid_output(run: RunContext) -> None:
    """Send what failed back to the model, as an invalid observation it reads like a tool's, and count it."""
    state = run.state
    judgement = state.judgement
    assert judgement is not None, "output_retry_left holds only with the answer judged invalid"
    state.output_rejections += 1
    run.output_failed = False
    state.judgement = None
    run.append(invalid_output_message(judgement.reason))


MACHINE = compile_machine(
    RUN_MACHINE,
    {
        f.__name__: f
        for f in (
            time_spent,
            turn_budget_spent,
            compaction_due,
            prompt_over_budget,
            cost_over_budget,
            can_fall_back,
            provider_failed,
            output_retry_left,
            answer_refused,
            reply_has_no_calls,
            tool_budget_spent,
            tool_cap_reached,
            call_rejected,
            approval_needed,
            answer_needed,
            answer_given,
            call_allowed,
            calls_pending,
            handed_over,
            failed_permanently,
            ended_by_tool,
            denial_repeated,
            result_repeated,
            name_repeat,
            last_turn_due,
            wrapped_for_cost,
            ask_last_word,
            compact_prompt,
            take_proposal,
            execute_call,
            take_answer,
            record_rejection,
            record_answer,
            record_handover,
            return_invalid_output,
            close_pending,
            task_unscreened,
            task_refused,
            result_unscreened,
            screen_stopped,
            screen_task,
            screen_observation,
        )
    },
)


def ask_about_unknown(run: RunContext, call: ToolCall, what: str, reason: str) -> None:
    """Open a pause asking a person about a call whose effect may have happened (the same key runs it again)."""
    state = run.state
    key = idempotency_key(run.run_id, state, call)
    pause_on(
        run,
        call,
        f"{OUTCOME_UNKNOWN}: {what}; check whether it took effect (idempotency key {key}), then approve to run it"
        f" again under that key or reject to record it as not run{reason}",
    )


def pause_on(run: RunContext, call: ToolCall, reason: str) -> None:
    """Open a pause asking a person about ``call`` (from inside the effect boundary) and announce it."""
    state = run.state
    state.judgement = Judgement("ask", reason)
    state.pause = open_pause(state, call, reason)  # what a person's approval will cover
    state.pause_id = state.pause.pause_id  # derived from the run, not drawn at random: the same on every replay
    if run.outbox is not None:
        run.post(
            events.Paused(run.run_id, time.time(), state.pause_id, call.call_id, call.name, state.judgement.reason)
        )
