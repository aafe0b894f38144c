"""
The driver: run a task through the run machine to a typed ending, or resume a paused run.

This module holds the run machine's guards (pure predicates over the run)
and effects (the on-enter callbacks that ask the model, judge proposals and
cross the effect boundary). The table they serve is
:data:`agent_fsm.machine.RUN_MACHINE`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._exceptions import NotPaused, RunError
from .boundary import execute, judge
from .gates import Gate, deny_effects
from .limits import Limits, Stop
from .machine import RUN_MACHINE, compile_machine
from .models import Model, ModelReply
from .observe import Observation, TokenEstimator, estimate_tokens
from .state import Judgement, ProviderFault, RunResult, RunState
from .tools import Registry, function_declarations
from .wire import assistant_text, normalise_reply, tool_message

__all__ = ["DEFAULT_SYSTEM_PROMPT", "AnswerCheck", "advance", "resume", "run", "start_state"]

DEFAULT_SYSTEM_PROMPT = (
    "You act only through the tools you are given. Each tool result comes back as JSON with "
    "ok, kind and content. A call that comes back invalid or denied is information: read the "
    "reason and change your proposal, or answer in plain text."
)


AnswerCheck = Callable[[str, RunState], "str | None"]
"""Judges a final answer before it is accepted: ``None`` accepts, a reason refuses (``answer_rejected``)."""


class _Run:
    """One run in flight: its plain-data state plus what it runs against (never saved)."""

    __slots__ = (
        "answer_check",
        "declaration_tokens",
        "declarations",
        "estimator",
        "gate",
        "limits",
        "model",
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
    ) -> None:
        self.state = state
        self.answer_check = answer_check
        self.model = model
        self.tools = tools
        self.gate = gate if gate is not None else deny_effects(tools)
        self.limits = limits
        self.estimator = estimator
        self.declarations = function_declarations(tools)
        self.declaration_tokens = sum(estimator(d) for d in self.declarations)

    @property
    def machine_state(self) -> str:
        return self.state.machine_state

    @machine_state.setter
    def machine_state(self, value: str) -> None:
        self.state.machine_state = value
        self.state.path.append(value)

    def append(self, message: dict[str, Any]) -> None:
        """Append a message, measuring it once (token accounting stays O(n) over a run)."""
        self.state.messages.append(message)
        self.state.message_tokens += self.estimator(message)

    def next_prompt_tokens(self) -> int:
        """Estimated size of the prompt the next model call would send."""
        return self.state.message_tokens + self.declaration_tokens + self.state.usage_offset


# --- guards: pure predicates over the run -----------------------------------


def turn_budget_spent(run: _Run) -> bool:
    """``max_turns`` model calls were made."""
    return run.state.turns >= run.limits.max_turns


def prompt_over_budget(run: _Run) -> bool:
    """The next prompt is estimated above ``max_prompt_tokens``."""
    return run.next_prompt_tokens() > run.limits.max_prompt_tokens


def provider_failed(run: _Run) -> bool:
    """The last model call raised an ``OSError``."""
    return run.state.fault is not None


def answer_refused(run: _Run) -> bool:
    """The reply was a plain answer and the answer check refused it."""
    return not run.state.pending and run.state.judgement is not None


def reply_has_no_calls(run: _Run) -> bool:
    """Nothing is pending: the reply was a plain answer."""
    return not run.state.pending


def tool_budget_spent(run: _Run) -> bool:
    """``max_tool_calls`` handler attempts were made."""
    limit = run.limits.max_tool_calls
    return limit is not None and run.state.tool_attempts >= limit


def call_rejected(run: _Run) -> bool:
    """The head proposal broke its contract or the gate denied it."""
    judgement = run.state.judgement
    return judgement is not None and judgement.kind in ("invalid", "denied")


def approval_needed(run: _Run) -> bool:
    """The gate asked for a human's decision."""
    judgement = run.state.judgement
    return judgement is not None and judgement.kind == "ask"


def call_allowed(run: _Run) -> bool:
    """The head proposal is valid and the gate allowed it."""
    judgement = run.state.judgement
    return judgement is not None and judgement.kind == "allow"


def failed_permanently(run: _Run) -> bool:
    """The call just executed reported a failure that retrying cannot fix."""
    observations = run.state.observations
    return bool(observations) and observations[-1].permanent


def calls_pending(run: _Run) -> bool:
    """The current reply has calls not yet judged."""
    return bool(run.state.pending)


def denial_repeated(run: _Run) -> bool:
    """Some rejected proposal came back ``repeated_denials`` times."""
    threshold = run.limits.repeated_denials
    return any(count >= threshold for count in run.state.denials.values())


# --- effects: the on-enter callbacks of states --------------------------------


def _ask_model(run: _Run) -> None:
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
    if isinstance(reply, ModelReply):
        if reply.prompt_tokens is not None:
            # The provider counted this prompt: adopt its figure and carry the
            # correction forward so later estimates start from the real size.
            state.usage_offset += reply.prompt_tokens - estimate
            state.prompt_token_log[-1] = reply.prompt_tokens
        reply = reply.message
    message, calls = normalise_reply(reply, state.turns)
    run.append(message)
    state.pending = calls


def take_proposal(run: _Run) -> None:
    """Take the next proposal (asking the model when the reply is used up) and judge it."""
    state = run.state
    if not state.pending:
        _ask_model(run)
    state.judgement = None
    if state.fault is not None:
        return
    if not state.pending:
        if run.answer_check is not None:
            text = assistant_text(state.messages[-1]) or ""
            reason = run.answer_check(text, state)
            if reason is not None:
                state.judgement = Judgement("invalid", str(reason))
    elif not tool_budget_spent(run):
        state.judgement = judge(state.pending[0], run.tools, run.gate, state=state)


def _observe(run: _Run, observation: Observation) -> None:
    state = run.state
    state.observations.append(observation)
    run.append(tool_message(observation))
    state.pending.pop(0)
    state.judgement = None


def execute_call(run: _Run) -> None:
    """Run the head call's handler: the only place a tool's authority is used."""
    state = run.state
    state.tool_attempts += 1  # counted when issued, so failed attempts spend the budget too
    _observe(run, execute(state.pending[0], run.tools, state=state))


def record_rejection(run: _Run) -> None:
    """Send the rejection back to the model and count it toward no-progress."""
    state = run.state
    call = state.pending[0]
    judgement = state.judgement
    assert judgement is not None and judgement.kind in ("invalid", "denied")
    key = call.fingerprint()
    state.denials[key] = state.denials.get(key, 0) + 1
    _observe(run, Observation(call.call_id, False, judgement.kind, judgement.reason))  # type: ignore[arg-type]


def close_pending(run: _Run) -> None:
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


def record_answer(run: _Run) -> None:
    """Keep the answer text of the final assistant message."""
    run.state.answer = assistant_text(run.state.messages[-1]) or ""


_MACHINE = compile_machine(
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


# --- the public driver ---------------------------------------------------------


def _reason(stop: Stop, state: RunState, limits: Limits) -> str | None:
    if stop is Stop.ANSWERED:
        return None
    if stop in (Stop.ANSWER_REJECTED, Stop.AWAITING_APPROVAL):
        return state.judgement.reason if state.judgement is not None else None
    if stop is Stop.PROVIDER_ERROR:
        return state.fault.message if state.fault is not None else None
    if stop is Stop.NO_PROGRESS:
        return f"the same rejected proposal came back {limits.repeated_denials} times: {state.observations[-1].content}"
    if stop is Stop.STEP_LIMIT:
        return f"{state.turns} of {limits.max_turns} model calls made"
    if stop is Stop.TOKEN_LIMIT:
        return f"the next prompt would exceed {limits.max_prompt_tokens} tokens"
    if stop is Stop.HANDOFF:
        content = state.observations[-1].content
        return f"a tool failed permanently: {content if isinstance(content, str) else json.dumps(content)}"
    return f"{state.tool_attempts} of {limits.max_tool_calls} tool attempts made"


def _result(state: RunState, limits: Limits) -> RunResult:
    stop = RUN_MACHINE.stop_of(state.machine_state)
    assert stop is not None, "the driver returned from a working state"
    return RunResult(
        stop=stop,
        answer=state.answer if stop is Stop.ANSWERED else None,
        state=state,
        blocked_on=state.pending[0] if stop is Stop.AWAITING_APPROVAL else None,
        reason=_reason(stop, state, limits),
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
    limits: Limits = Limits(),
    system_prompt: str | None = None,
    history: Sequence[Mapping[str, Any]] = (),
    answer_check: AnswerCheck | None = None,
    estimator: TokenEstimator = estimate_tokens,
) -> RunResult:
    """
    Run ``task`` to a typed ending.

    The model only proposes. Each proposal is validated against its tool's
    contract, judged by ``gate`` immediately before execution (``None`` runs
    effect-free tools and refuses effectful ones), executed, and observed;
    budgets in ``limits`` are checked before any work is admitted.
    ``history`` continues a conversation (earlier messages, e.g.
    ``previous.state.messages``); ``answer_check`` may refuse a final answer,
    which then ends the run ``answer_rejected`` instead of ``answered``.

    Returns:
        A :class:`RunResult`; ``stop`` is absorbing, or ``awaiting_approval``
        (continue with :func:`resume`).

    Raises:
        HandlerError: a handler raised an unexpected exception (``.state`` keeps the run).
        GateError: the gate raised or answered something that is not a verdict.
    """
    state = start_state(task, system_prompt=system_prompt, history=history, estimator=estimator)
    return advance(state, model, tools, gate=gate, limits=limits, answer_check=answer_check, estimator=estimator)


def advance(
    state: RunState,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None = None,
    limits: Limits = Limits(),
    answer_check: AnswerCheck | None = None,
    estimator: TokenEstimator = estimate_tokens,
) -> RunResult:
    """Drive ``state`` (modified in place) from where it is until it rests."""
    context = _Run(state, model, tools, gate, limits, estimator, answer_check)
    _MACHINE.advance(context)
    return _result(state, limits)


def resume(
    state: RunState,
    model: Model,
    tools: Registry,
    *,
    approve: bool,
    gate: Gate | None = None,
    limits: Limits = Limits(),
    reason: str = "",
    answer_check: AnswerCheck | None = None,
    estimator: TokenEstimator = estimate_tokens,
) -> RunResult:
    """
    Continue a run paused in ``awaiting_approval``.

    ``approve=True`` runs the blocked call once, without asking the gate again;
    ``approve=False`` turns it into a ``denied`` observation carrying
    ``reason``. Either way the run goes on under ``gate`` and ``limits``.
    ``state`` itself is left as it was; the result holds a new state.

    Raises:
        NotPaused: ``state`` is not awaiting approval.
    """
    if state.machine_state != "AwaitingApproval":
        raise NotPaused(f"only a run awaiting approval can be resumed; this one is in {state.machine_state!r}", state=state)
    state = copy.deepcopy(state)
    context = _Run(state, model, tools, gate, limits, estimator, answer_check)
    if approve:
        _MACHINE.fire(context, "approve")
    else:
        state.judgement = Judgement("denied", f"rejected by a human reviewer: {reason or 'no reason given'}")
        _MACHINE.fire(context, "reject")
    _MACHINE.advance(context)
    return _result(state, limits)
