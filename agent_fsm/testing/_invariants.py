"""
Run invariants as assertions: each failure names the invariant and the message or observation that broke it.

:func:`agent_fsm.check_run` answers with a dict of booleans, which is what a
report wants. A test wants the opposite: stop at the first broken rule and
say where. The checks here read only the run's record (and, when given, the
registry, the gate and the effect log), so they apply to any driver that
returns a :class:`~agent_fsm.RunResult`, not only to the engine.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from agent_fsm.engine import (
    CODE_PATTERN,
    RUN_MACHINE,
    EffectMatch,
    Gate,
    Limits,
    Observation,
    Registry,
    RunResult,
    RunState,
    Stop,
    ToolCall,
    as_verdict,
    assistant_text,
    check_run,
    matches_call,
    parse_tool_calls,
    tool_message,
    validate_call,
)

__all__ = [
    "INVARIANTS",
    "CallMatch",
    "InvariantViolation",
    "assert_nothing_forbidden",
    "assert_run_invariants",
    "by_call",
    "executed_calls",
]

CallMatch = Callable[[Any, ToolCall], bool]
"""``match(effect, call)``: does this entry of a world's own effect log come from this executed call?"""

INVARIANTS: dict[str, str] = {
    "typed_ending": "the run rests in a declared absorbing or paused state, its stop agrees, and its code is a name",
    "turn_budget": "model calls never exceed max_turns, and every call's prompt size is logged",
    "token_budget": "no prompt sent exceeds max_prompt_tokens",
    "tool_budget": "handler attempts never exceed max_tool_calls, and each attempt left one observation",
    "stop_justified": "a budget stop is only reported once that budget is really spent",
    "observations_correlated": (
        "tool messages answer the latest assistant message's calls, in order, one per observation"
    ),
    "observations_typed": "an observation is ok exactly when it is a result",
    "contract_checked": "every executed call names a registered tool with arguments its schema accepts",
    "gate_consulted": "every executed call was allowed by the gate or approved by a human",
    "effects_authorized": "every effect in the log comes from an executed call (its result, or a call_id naming it)",
    "answer_recorded": "an answer is the final assistant message's text, and only an answered run has one",
    "paused_on_call": "a paused run is blocked on a proposed call that has no observation yet",
    "cancelled_at_pause": (
        "a cancelled run was cancelled by a person at a pause, every call it waited on answered as not run"
    ),
    "state_round_trip": "the state survives a JSON round trip unchanged",
    "check_run": "the engine's own agent_fsm.check_run agrees",
    "forbidden_effect": "no call the given predicate forbids crosses the effect boundary unless a human approved it",
    "expected_stop": "the run ends in one of the expected stops",
    "deterministic_replay": "the same replies and decisions replay the same transcript",
    "bounded_run": "a run rests within the transitions (or model calls) its limits allow: the watchdog",
    "budget_bound": "a budget counter never goes down and never passes its limit",
    "budgeted_cycle": "each cycle a run goes round strictly grows a budget its edges declare they consume",
    "reachable_state": "some run in the world enters each state of the run machine",
    "screen_never_shows": "once a result screen has read a tool result, the model is never shown what 'never' marks",
    "screen_keeps_raw": "a screened observation keeps the raw result, whatever the model was shown",
    # the run loop's options (agent_fsm.testing.check_parallel_calls, assert_answer_held, assert_rate_kept)
    "parallel_equals_sequential": "running effect-free calls together leaves the run one-by-one gives, timing aside",
    "answer_held": "with hold_answer, no text of an answer the run did not accept reaches the consumer",
    "rate_kept": "no window holds more calls than the rate limit's burst plus its rate over the window",
    # agents nested in agents (agent_fsm.testing.assert_nested_invariants)
    "ends_absorbing": "the run and every run nested in it end in an absorbing state once every pause is decided",
    "nested_budgets": "each nested run spends at most its own limits and what its parent had left when it began",
    "charged_to_parent": "a run's counters are its own work plus what the runs it nested spent",
    "effect_gated": "every effect was allowed by its own level's gate, or approved by a person after that gate asked",
    "decision_covers_call": "a decision runs exactly the innermost blocked call, at most once, with its arguments",
    "decided_once": "deciding a pause that was decided already is refused (NotPaused) and changes nothing",
    "children_kept": "every nested call's whole run is kept in its parent's state, ended, its ending observed",
}
"""Every invariant :func:`assert_run_invariants` checks, by name, with what it means."""


class InvariantViolation(AssertionError):
    """
    A run broke one of :data:`INVARIANTS`.

    ``invariant`` is its name and ``where`` the message index or observation
    it was found at (``None`` when it concerns the whole run).
    """

    def __init__(self, invariant: str, detail: str, *, where: str | None = None) -> None:
        self.invariant = invariant
        self.detail = detail
        self.where = where
        at = f" at {where}" if where else ""
        super().__init__(f"invariant {invariant!r} broken{at}: {detail}\n  (it requires: {INVARIANTS[invariant]})")


def _fail(invariant: str, detail: str, where: str | None = None) -> None:
    raise InvariantViolation(invariant, detail, where=where)


def executed_calls(state: RunState) -> list[tuple[int, ToolCall]]:
    """
    The calls that crossed the effect boundary (a ``result`` or ``error``
    observation), each with the index of its tool message, as parsed from the transcript.
    """
    found: list[tuple[int, ToolCall]] = []
    calls: list[ToolCall] = []
    answered = 0
    observation_index = 0
    for index, message in enumerate(state.messages):
        if message.get("role") == "assistant":
            calls, answered = parse_tool_calls(message), 0
        elif message.get("role") == "tool":
            if (
                answered < len(calls)
                and observation_index < len(state.observations)
                and state.observations[observation_index].kind in ("result", "error")
            ):
                found.append((index, calls[answered]))
            answered += 1
            observation_index += 1
    return found


def by_call(match: CallMatch, state: RunState) -> EffectMatch:
    """
    The ``match(effect, observation)`` that :func:`assert_run_invariants` and
    :func:`agent_fsm.check_run` take, from a matcher of an effect and the call
    ``state`` executed: a world that logs ``("pay", payee, cents)`` per payment
    is matched on the call's arguments, with no reshaping of its log.
    """
    executed = [o for o in state.observations if o.kind in ("result", "error")]
    calls = {id(o): call for o, (_, call) in zip(executed, executed_calls(state), strict=False)}

    def matches(effect: Any, observation: Observation) -> bool:
        call = calls.get(id(observation))
        return call is not None and bool(match(effect, call))

    return matches


def _check_ending(result: RunResult, limits: Limits) -> None:
    state = result.state
    names = {s.name for s in RUN_MACHINE.states}
    if not isinstance(result.stop, Stop):
        _fail("typed_ending", f"stop is {result.stop!r}, not a Stop")
    if state.machine_state not in names:
        _fail("typed_ending", f"machine state {state.machine_state!r} is not a state of the run machine")
    if not RUN_MACHINE.state(state.machine_state).is_resting:
        _fail("typed_ending", f"the run returned from working state {state.machine_state!r}")
    if RUN_MACHINE.stop_of(state.machine_state) is not result.stop:
        _fail("typed_ending", f"stop {result.stop!r} disagrees with machine state {state.machine_state!r}")
    code = getattr(result, "code", None)
    if not isinstance(code, str) or CODE_PATTERN.fullmatch(code) is None:
        _fail("typed_ending", f"code {code!r} is not an ending code (a lowercase identifier)")
    if state.code is not None and code != state.code:
        _fail("typed_ending", f"code {code!r} disagrees with the code {state.code!r} the state recorded")


def _check_budgets(result: RunResult, limits: Limits) -> None:
    state = result.state
    if state.turns > limits.max_turns:
        _fail("turn_budget", f"{state.turns} model calls made, max_turns is {limits.max_turns}")
    if len(state.prompt_token_log) != state.turns:
        _fail("turn_budget", f"{state.turns} model calls made but {len(state.prompt_token_log)} prompt sizes logged")
    for index, tokens in enumerate(state.prompt_token_log):
        if tokens > limits.max_prompt_tokens:
            _fail(
                "token_budget",
                f"prompt {index + 1} of {len(state.prompt_token_log)} was {tokens} tokens,"
                f" max_prompt_tokens is {limits.max_prompt_tokens}",
                where=f"model call {index + 1}",
            )
    if limits.max_tool_calls is not None and state.tool_attempts > limits.max_tool_calls:
        _fail("tool_budget", f"{state.tool_attempts} tool attempts made, max_tool_calls is {limits.max_tool_calls}")
    crossed = sum(1 for o in state.observations if o.kind in ("result", "error"))
    if crossed != state.tool_attempts:
        _fail("tool_budget", f"{state.tool_attempts} tool attempts counted but {crossed} result/error observations")
    stop = result.stop
    if stop is Stop.STEP_LIMIT and state.turns < limits.max_turns:
        _fail("stop_justified", f"stopped step_limit after {state.turns} of {limits.max_turns} model calls")
    if stop is Stop.TOOL_LIMIT and (limits.max_tool_calls is None or state.tool_attempts < limits.max_tool_calls):
        _fail(
            "stop_justified", f"stopped tool_limit after {state.tool_attempts} attempts (max {limits.max_tool_calls})"
        )
    if result.code == "wrap_up" and (
        stop is not Stop.ANSWERED
        or not limits.wrap_up
        or state.path[-2:] != ["WrappingUp", "Answered"]
        or (state.turns != limits.max_turns and not _early_wrap_up_explained(state, limits))
    ):
        _fail("stop_justified", f"coded wrap_up but stopped {stop} after {state.turns} of {limits.max_turns} calls")
    most = limits.repeated_results
    if stop is Stop.NO_PROGRESS and result.code == "repeated_result":
        if most is None or not any(n >= most for n in state.repeats.values()):
            _fail("stop_justified", f"stopped no_progress (repeated_result) but no result came back {most} times")
    elif (
        stop is Stop.NO_PROGRESS
        and not any(n >= limits.repeated_denials for n in state.denials.values())
        and state.alternation < limits.oscillation
    ):
        _fail(
            "stop_justified",
            f"stopped no_progress but no proposal was rejected {limits.repeated_denials} times"
            f" and no two alternated over {limits.oscillation} rejections",
        )


def _early_wrap_up_explained(state: RunState, limits: Limits) -> bool:
    """
    Whether a budget other than the turns may have called the wrap-up: money, time, or the prompt's size.

    The prompt's (see ``wrap_up_cause``) needs the normal prompt the wrap-up
    replaced to pass half of ``max_prompt_tokens`` (that prompt, grown by at
    most its own size, would not fit). That prompt was at most the wrap-up's
    and the tool declarations, which an earlier prompt carried too; a
    wrap-up as the first call has no earlier prompt to bound it by.
    """
    if limits.max_cost is not None or limits.max_seconds is not None:
        return True
    *earlier, last = state.prompt_token_log
    return not earlier or 2 * (last + max(earlier)) > limits.max_prompt_tokens


def _check_correlation(state: RunState) -> None:
    calls: list[ToolCall] = []
    answered = 0
    observation_index = 0
    for index, message in enumerate(state.messages):
        role = message.get("role")
        if role == "assistant":
            calls, answered = parse_tool_calls(message), 0
            continue
        if role != "tool":
            continue
        where = f"message {index}"
        if answered >= len(calls):
            _fail(
                "observations_correlated",
                f"tool message {message.get('tool_call_id')!r} answers no pending call",
                where,
            )
        expected = calls[answered].call_id
        if message.get("tool_call_id") != expected:
            _fail(
                "observations_correlated",
                f"tool message answers {message.get('tool_call_id')!r},"
                f" the next call awaiting an answer is {expected!r}",
                where,
            )
        if observation_index >= len(state.observations):
            _fail("observations_correlated", "a tool message has no observation behind it", where)
        observation = state.observations[observation_index]
        # A result screen's redaction or stop shows the model something else (the raw result stays here).
        screened = any(r.call_id == expected and r.action != "pass" for r in state.screens)
        if observation.call_id != expected or (tool_message(observation) != dict(message) and not screened):
            _fail(
                "observations_correlated",
                f"observation {observation_index} ({observation!r}) does not match its tool message {message!r}",
                where,
            )
        answered += 1
        observation_index += 1
    if observation_index != len(state.observations):
        _fail(
            "observations_correlated",
            f"{len(state.observations)} observations but only {observation_index} tool messages carry them",
        )
    for index, observation in enumerate(state.observations):
        if observation.ok != (observation.kind == "result"):
            _fail(
                "observations_typed",
                f"{observation!r} has ok={observation.ok} with kind {observation.kind!r}",
                f"observation {index}",
            )


def _check_boundary(state: RunState, tools: Registry | None, gate: Gate | None, approved: Collection[str]) -> None:
    for index, call in executed_calls(state):
        where = f"message {index}"
        if tools is not None:
            reason = validate_call(call, tools)
            if reason is not None:
                _fail("contract_checked", f"{call!r} was executed although its contract refuses it: {reason}", where)
        if gate is not None and call.call_id not in approved:
            verdict = as_verdict(gate(call))
            if verdict.kind != "allow":
                _fail(
                    "gate_consulted",
                    f"{call!r} was executed but the gate answers {verdict.kind!r} ({verdict.reason})"
                    " and no human approved it",
                    where,
                )


def _check_effects(state: RunState, effects: Sequence[Any], match: EffectMatch | None) -> None:
    executed = [o for o in state.observations if o.kind in ("result", "error")]

    def matches(effect: Any, observation: Observation) -> bool:
        if match is not None:
            return match(effect, observation)
        # The engine's default (a ``call_id`` field, or equality), with JSON's view of equality:
        # a tuple the world logged equals the list the observation stored.
        return matches_call(effect, observation) or (observation.ok and _same_json(effect, observation.content))

    for index, effect in enumerate(effects):
        if not any(matches(effect, o) for o in executed):
            _fail("effects_authorized", f"effect {effect!r} matches no executed call", f"effect {index}")


def _same_json(left: Any, right: Any) -> bool:
    return json.dumps(left, sort_keys=True, default=str) == json.dumps(right, sort_keys=True, default=str)


def _check_answer_and_pause(result: RunResult) -> None:
    state = result.state
    assistants = [(i, m) for i, m in enumerate(state.messages) if m.get("role") == "assistant"]
    if result.stop in (Stop.ANSWERED, Stop.ANSWER_REJECTED):
        if not assistants or state.messages[-1] is not assistants[-1][1] or parse_tool_calls(assistants[-1][1]):
            _fail(
                "answer_recorded", f"stopped {result.stop} but the transcript does not end in a plain assistant message"
            )
        text = assistant_text(assistants[-1][1]) or ""
        expected = text if result.stop is Stop.ANSWERED else None
        if result.answer != expected:
            _fail(
                "answer_recorded",
                f"answer is {result.answer!r}, the final assistant message says {text!r}",
                f"message {assistants[-1][0]}",
            )
    elif result.answer is not None:
        _fail("answer_recorded", f"stopped {result.stop} yet carries the answer {result.answer!r}")
    if result.stop is Stop.AWAITING_APPROVAL:
        blocked = result.blocked_on
        if blocked is None or not assistants:
            raise InvariantViolation("paused_on_call", "paused with nothing to approve")
        last_index, last = assistants[-1]
        calls = [c.call_id for c in parse_tool_calls(last)]
        answered = sum(1 for m in state.messages[last_index + 1 :] if m.get("role") == "tool")
        if answered >= len(calls) or calls[answered] != blocked.call_id:
            _fail(
                "paused_on_call",
                f"blocked on {blocked!r}, which is not the latest reply's next unanswered call",
                f"message {last_index}",
            )
    elif result.blocked_on is not None:
        _fail("paused_on_call", f"stopped {result.stop} yet blocked on {result.blocked_on!r}")
    if result.stop is Stop.CANCELLED:
        _check_cancelled(result, assistants)


def _check_cancelled(result: RunResult, assistants: list[tuple[int, dict[str, Any]]]) -> None:
    state = result.state
    if state.path[-2:] != ["AwaitingApproval", "Cancelled"] or state.pending:
        _fail("cancelled_at_pause", f"ended cancelled along {state.path[-3:]} with {len(state.pending)} calls pending")
    last_index, last = assistants[-1] if assistants else (0, {})
    calls = [c.call_id for c in parse_tool_calls(last)]
    answers = {o.call_id: o for o in state.observations[-len(calls) :]} if calls else {}
    final = answers.get(calls[-1]) if calls else None
    # The calls the cancel closed: not run, naming who cancelled; a nested run's call ends with that run, cancelled.
    closed = final is not None and (
        (final.kind == "denied" and str(final.content).startswith("not run: cancelled by "))
        or (final.kind == "error" and isinstance(final.content, dict) and final.content.get("stop") == "cancelled")
    )
    if not closed:
        _fail(
            "cancelled_at_pause",
            "the last call of the reply it was cancelled in is not answered as not run",
            f"message {last_index}",
        )


def assert_run_invariants(
    result: RunResult,
    effects: Sequence[Any] | None = None,
    limits: Limits = Limits(),
    *,
    tools: Registry | None = None,
    gate: Gate | None = None,
    approved: Iterable[str] = (),
    match: EffectMatch | None = None,
) -> None:
    """
    Assert every invariant of :data:`INVARIANTS` that the arguments allow checking.

    ``effects`` (the world's effect log) enables ``effects_authorized``;
    ``tools`` enables ``contract_checked``; ``gate`` (a pure function of the
    call) enables ``gate_consulted``, with ``approved`` the ids of calls a
    human approved; ``match`` ties an effect-log entry to an executed call as
    in :func:`agent_fsm.check_run` (default: a ``call_id`` field naming the
    call, or equality with its result). The engine's own
    :func:`agent_fsm.check_run` must agree.

    Raises:
        InvariantViolation: the first invariant found broken, naming it and where.
    """
    state = result.state
    _check_ending(result, limits)
    _check_budgets(result, limits)
    _check_correlation(state)
    _check_boundary(state, tools, gate, set(approved))
    if effects is not None:
        _check_effects(state, effects, match)
    _check_answer_and_pause(result)
    if RunState.from_json(state.to_json()) != state:
        _fail("state_round_trip", "RunState.from_json(state.to_json()) differs from the state")
    logged = effects if effects is not None else ()
    verdicts = check_run(result, logged, limits) if match is None else check_run(result, logged, limits, match=match)
    broken = sorted(name for name, holds in verdicts.items() if not holds)
    if broken:
        _fail("check_run", f"agent_fsm.check_run reports {broken} broken")


def assert_nothing_forbidden(
    state: RunState, forbidden: Callable[[ToolCall], bool], approved: Collection[str] = ()
) -> None:
    """
    Assert that no executed call of ``state`` is one ``forbidden`` marks, unless a human approved it.

    Raises:
        InvariantViolation: ``forbidden_effect``, naming the call and its message.
    """
    for index, call in executed_calls(state):
        if call.call_id not in approved and forbidden(call):
            _fail(
                "forbidden_effect",
                f"the gate let {call.name}({json.dumps(call.arguments)}) through (call id {call.call_id!r})",
                f"message {index}",
            )
