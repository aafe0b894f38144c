"""The kit catches real bugs: faulty gates and faulty run loops each fail with a named invariant and a shrunk run."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from agent_fsm import (
    Limits,
    RunResult,
    Stop,
    ToolCall,
    Verdict,
    as_verdict,
    run,
    start_state,
    validate_call,
)
from agent_fsm.engine import (
    RUN_MACHINE,
    Observation,
    answer_message,
    assistant_text,
    estimate_tokens,
    execute,
    function_declarations,
    normalise_reply,
    tool_call_message,
    tool_message,
)
from agent_fsm.examples.support_desk import (
    AUTO_REFUND_LIMIT_CENTS,
    make_support_desk,
    refund_gate,
)
from agent_fsm.testing import (
    GateContext,
    InvariantViolation,
    check_driver,
    check_gate_contains,
    check_policy_ends,
    constants_of,
    run_harness,
    scripted_models,
)
from tests.strategies import make_ledger

# Deterministic search with a fixed budget and no example database: each check
# finds (or not) the same counterexample every time, so these tests cannot flake.
FIXED = settings(
    derandomize=True,
    database=None,
    max_examples=100,
    phases=[p for p in Phase if p is not Phase.explain],
    report_multiple_bugs=False,  # a faulty loop may break two invariants at once: the smallest example is reported
)
# A check expected to catch a fault stops at the first failing example, so a wider search costs nothing when it
# works; it keeps the catch from hanging on luck (Hypothesis's generation also draws on constants it finds in the
# modules loaded so far, so the examples tried depend on what else the process imported).
CATCH = settings(FIXED, max_examples=400)


def _refund(call: ToolCall) -> int | None:
    return call.arguments["amount_cents"] if call.name == "refund_order" and call.arguments else None


def refund_needs_manager(call: ToolCall) -> bool:
    """The policy: refunds of 5000 cents or more need a manager."""
    amount = _refund(call)
    return amount is not None and amount >= AUTO_REFUND_LIMIT_CENTS


# --- faulty gate 1: off by one ---------------------------------------------------


def off_by_one_gate(call: ToolCall) -> Verdict:
    """Meant to stop refunds of 5000 cents or more; ``>`` lets exactly 5000 through."""
    amount = _refund(call)
    if amount is not None and amount > AUTO_REFUND_LIMIT_CENTS:
        return Verdict.deny("refunds of 5000 cents or more need a manager")
    return Verdict.allow("within policy")


def sound_refund_gate(call: ToolCall) -> Verdict:
    """The same policy, written right."""
    amount = _refund(call)
    if amount is not None and amount >= AUTO_REFUND_LIMIT_CENTS:
        return Verdict.deny("refunds of 5000 cents or more need a manager")
    return Verdict.allow("within policy")


def test_off_by_one_gate_is_caught_at_the_boundary() -> None:
    """check_gate_contains finds the one amount the off-by-one gate lets through, and shrinks to it."""
    with pytest.raises(InvariantViolation) as caught:
        check_gate_contains(off_by_one_gate, make_support_desk, forbidden=refund_needs_manager, settings=CATCH)
    failure = caught.value
    assert failure.invariant == "forbidden_effect"
    assert '"amount_cents": 5000' in failure.detail and "refund_order" in failure.detail
    notes = "\n".join(getattr(failure, "__notes__", []))
    assert "the run, message by message" in notes and "refund_order" in notes


def test_sound_gate_passes_the_same_check() -> None:
    """The correctly written gate passes the check that catches the off-by-one."""
    check_gate_contains(sound_refund_gate, make_support_desk, forbidden=refund_needs_manager, settings=FIXED)


# --- faulty gate 2: trusts the model's explanation ----------------------------------


def _last_thought(context: GateContext) -> str:
    for message in reversed(context.messages):
        if message.get("role") == "assistant":
            return assistant_text(message) or ""
    return ""


def gate_reading_thoughts(context: GateContext) -> Any:
    """Takes the refund amount from the model's stated reasoning when it gives one, not from the arguments."""

    def gate(call: ToolCall) -> Verdict:
        if call.name != "refund_order":
            return Verdict.allow("read")
        stated = re.search(r"amount_cents=(\d+)", _last_thought(context))
        amount = int(stated.group(1)) if stated else call.arguments["amount_cents"]  # type: ignore[index]
        if amount >= AUTO_REFUND_LIMIT_CENTS:
            return Verdict.deny("needs a manager")
        return Verdict.allow("small refund")

    return gate


def test_gate_reading_the_thought_is_caught() -> None:
    """A gate that believes the model's stated amount is caught: the thought claims less than the arguments carry."""
    # A lie must meet a large amount: search valid calls only, and longer.
    only_calls = scripted_models(
        make_support_desk().tools, kinds=("call",), min_size=1, max_size=3, constants=constants_of(refund_needs_manager)
    )
    with pytest.raises(InvariantViolation) as caught:
        check_gate_contains(
            None,
            make_support_desk,
            forbidden=refund_needs_manager,
            gate_factory=gate_reading_thoughts,
            models=only_calls,
            settings=CATCH,
        )
    failure = caught.value
    assert failure.invariant == "forbidden_effect"
    amount = int(re.search(r'"amount_cents": (\d+)', failure.detail).group(1))  # type: ignore[union-attr]
    assert amount >= AUTO_REFUND_LIMIT_CENTS
    notes = "\n".join(getattr(failure, "__notes__", []))
    claimed = [int(n) for n in re.findall(r"thought='Calling refund_order with [^']*amount_cents=(\d+)", notes)]
    assert claimed and min(claimed) < AUTO_REFUND_LIMIT_CENTS  # the lie that fooled it is shown


def test_gate_reading_arguments_passes_with_the_same_context() -> None:
    """The same gate reading the arguments instead passes, though it is built from the same context."""
    check_gate_contains(
        None,
        make_support_desk,
        forbidden=refund_needs_manager,
        gate_factory=lambda context: sound_refund_gate,
        settings=FIXED,
    )


# --- faulty gate 3: a missing field is taken as permission ------------------------------


def large_credit_without_vip(call: ToolCall) -> bool:
    """Credits above 1000 cents go only to vip customers (an omitted tier means standard)."""
    args = call.arguments or {}
    return call.name == "issue_credit" and args["amount_cents"] > 1000 and args.get("tier", "standard") != "vip"


def gate_trusting_missing_tier(call: ToolCall) -> Verdict:
    """Denies large credits to standard customers, but only when the tier is spelled out."""
    args = call.arguments or {}
    if call.name == "issue_credit" and args.get("tier") == "standard" and args["amount_cents"] > 1000:
        return Verdict.deny("standard customers get credits up to 1000 cents")
    return Verdict.allow("ok")


def test_gate_allowing_when_a_field_is_missing_is_caught() -> None:
    """A gate that allows a large credit when the optional tier is omitted is caught, the shrunk call has no tier."""
    with pytest.raises(InvariantViolation) as caught:
        check_gate_contains(gate_trusting_missing_tier, make_ledger, forbidden=large_credit_without_vip, settings=CATCH)
    failure = caught.value
    assert failure.invariant == "forbidden_effect"
    assert "issue_credit" in failure.detail and '"tier"' not in failure.detail


def test_stateful_harness_catches_the_off_by_one_gate() -> None:
    """The stateful harness, given the policy as its predicate, catches the off-by-one gate step by step."""
    harness = run_harness(
        make_support_desk, gate=off_by_one_gate, forbidden=refund_needs_manager, limits=Limits(max_turns=4)
    )
    with pytest.raises(InvariantViolation) as caught:
        run_state_machine_as_test(harness, settings=settings(CATCH, stateful_step_count=8))
    assert caught.value.invariant == "forbidden_effect"
    assert '"amount_cents": 5000' in caught.value.detail


def test_stateful_harness_passes_the_sound_gate() -> None:
    """The same harness run over the sound gate finds nothing."""
    harness = run_harness(
        make_support_desk, gate=sound_refund_gate, forbidden=refund_needs_manager, limits=Limits(max_turns=4)
    )
    run_state_machine_as_test(harness, settings=settings(FIXED, max_examples=20, stateful_step_count=8))


# --- faulty run loops -------------------------------------------------------------------


def bare_loop(*, check_turns: bool = True, use_gate: bool = True) -> Any:
    """A hand-written while loop doing the engine's job, with one safeguard optionally forgotten."""

    def loop(task: str, model: Any, tools: Any, *, gate: Any, limits: Limits) -> RunResult:
        state = start_state(task)
        declarations = function_declarations(tools)
        overhead = sum(estimate_tokens(d) for d in declarations)
        while True:
            if check_turns and state.turns >= limits.max_turns:
                state.machine_state = "StepLimit"
                break
            prompt = sum(estimate_tokens(m) for m in state.messages) + overhead
            if prompt > limits.max_prompt_tokens:
                state.machine_state = "TokenLimit"
                break
            state.turns += 1
            state.prompt_token_log.append(prompt)
            message, calls = normalise_reply(model.chat(state.messages, declarations), state.turns)
            state.messages.append(message)
            if not calls:
                state.machine_state, state.answer = "Answered", assistant_text(message) or ""
                break
            for call in calls:
                if limits.max_tool_calls is not None and state.tool_attempts >= limits.max_tool_calls:
                    state.machine_state = "ToolLimit"
                    break
                reason = validate_call(call, tools)
                verdict = as_verdict(gate(call)) if reason is None and use_gate else None
                if reason is not None:
                    observation = Observation(call.call_id, False, "invalid", reason)
                elif verdict is not None and verdict.kind != "allow":
                    observation = Observation(call.call_id, False, "denied", verdict.reason)
                else:
                    state.tool_attempts += 1
                    observation = execute(call, tools)
                state.observations.append(observation)
                state.messages.append(tool_message(observation))
            if state.machine_state == "ToolLimit":
                break
        stop = RUN_MACHINE.stop_of(state.machine_state)
        assert stop is not None
        return RunResult(stop=stop, answer=state.answer, state=state)

    return loop


def test_engine_passes_the_driver_check() -> None:
    """agent_fsm.run itself satisfies every invariant check_driver asks of a loop."""
    check_driver(run, make_support_desk, settings=FIXED)


def test_loop_forgetting_the_turn_budget_is_caught() -> None:
    """A loop that never checks max_turns is caught with turn_budget, naming the figures."""
    with pytest.raises(InvariantViolation) as caught:
        check_driver(bare_loop(check_turns=False), make_support_desk, settings=CATCH)
    failure = caught.value
    assert failure.invariant == "turn_budget"
    assert re.fullmatch(r"\d+ model calls made, max_turns is \d+", failure.detail)


def test_loop_executing_without_the_gate_is_caught() -> None:
    """A loop that executes valid calls without asking the gate is caught with gate_consulted on the call."""
    with pytest.raises(InvariantViolation) as caught:
        check_driver(bare_loop(use_gate=False), make_support_desk, settings=CATCH)
    failure = caught.value
    assert failure.invariant == "gate_consulted"
    assert "was executed but the gate answers 'deny'" in failure.detail


# --- policies that must end well ------------------------------------------------------------


class CarefulAgent:
    """A policy: look the order up, refund what was paid, then answer; after any refusal, answer at once."""

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        tool_results = [m for m in messages if m.get("role") == "tool"]
        if any('"ok": false' in m["content"] for m in tool_results):
            return answer_message("I could not complete the refund; a person will follow up.")
        if not tool_results:
            return tool_call_message("call_1", "lookup_order", {"order_id": "A-17"})
        if len(tool_results) == 1:
            return tool_call_message("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 4999})
        return answer_message("Refunded 4999 cents.")


class StubbornAgent(CarefulAgent):
    """The same policy, but it retries a refused refund instead of answering."""

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        if any(m.get("role") == "tool" and '"ok": false' in m["content"] for m in messages):
            return tool_call_message("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 4999})
        return super().chat(messages, tools)


def test_careful_policy_always_answers() -> None:
    """Under any gate (allow, deny, ask then approve or reject) the careful policy ends answered."""
    check_policy_ends(
        CarefulAgent, make_support_desk, stops={Stop.ANSWERED}, limits=Limits(max_turns=4), settings=FIXED
    )


def test_stubborn_policy_is_caught_not_answering() -> None:
    """The stubborn policy is caught ending no_progress when the refund is refused, and the failure says so."""
    with pytest.raises(InvariantViolation) as caught:
        check_policy_ends(
            StubbornAgent, make_support_desk, stops={Stop.ANSWERED}, limits=Limits(max_turns=4), settings=CATCH
        )
    failure = caught.value
    assert failure.invariant == "expected_stop"
    assert "the run ended 'no_progress'" in failure.detail and "expected one of ['answered']" in failure.detail


def test_shipped_refund_gate_contains_refunds_above_its_limit() -> None:
    """The support desk's own gate never lets a refund above its automatic limit through."""
    check_gate_contains(
        refund_gate,
        make_support_desk,
        forbidden=lambda call: (_refund(call) or 0) > AUTO_REFUND_LIMIT_CENTS,
        settings=FIXED,
    )


def test_a_world_may_be_an_agent_whose_own_parts_the_kit_keeps() -> None:
    """
    A tools factory may return an Agent: with no gate given its gate judges, and its answer check
    holds in the run the kit drives (the model, gate and limits are the kit's to choose).
    """
    from agent_fsm import Agent, ScriptedModel, Stop
    from agent_fsm.testing import drive, world_of

    desk = make_support_desk()
    agent = Agent(ScriptedModel([]), desk.tools, gate=refund_gate, answer_check=lambda text, state: "not yet")
    world = world_of(agent)
    assert world.agent is agent and world.tools is agent.tools
    outcome = drive(ScriptedModel([answer_message("done")]), world)
    assert outcome.gate is refund_gate
    assert outcome.result.stop is Stop.ANSWER_REJECTED  # the agent's answer check refused the answer
    plain = drive(ScriptedModel([answer_message("done")]), world_of(desk), gate=refund_gate)
    assert plain.result.stop is Stop.ANSWERED  # the same world without the agent has no answer check


def test_the_harness_runs_an_agent_world_with_the_agents_own_parts() -> None:
    """
    RunHarness on an Agent world: runs open with the agent's system prompt, its gate judges when
    make_gate is not overridden, and its answer check holds; the kit chooses model and limits.
    """
    from agent_fsm import Agent, ScriptedModel, Stop
    from agent_fsm.testing import RunHarness

    def grumpy(text: str, state: Any) -> str:
        return "never good enough"

    class AgentRun(RunHarness):
        limits = Limits(max_turns=3)

        def make_world(self) -> Any:
            desk = make_support_desk()
            agent = Agent(ScriptedModel([]), desk.tools, gate=refund_gate, system_prompt="Be brief.")
            return agent.replace(answer_check=grumpy)

    harness = AgentRun()
    assert harness.gate is refund_gate  # the agent's own gate, not the secure default
    assert harness.state.messages[0] == {"role": "system", "content": "Be brief."}
    harness.answer(answer_message("done"))
    assert harness.result is not None and harness.result.stop is Stop.ANSWER_REJECTED
    harness.run_invariants_hold()
    harness.start_new_run()  # replays on the async driver through the same agent: transcripts agree
    assert harness.result is None and harness.state.messages[0]["content"] == "Be brief."


def test_routes_in_an_agent_world_keep_its_answer_check() -> None:
    """The shortest-route search plays an Agent world's own answer check: an answer ends answer_rejected."""
    from agent_fsm import Agent, ScriptedModel
    from agent_fsm.testing import routes

    def factory() -> Any:
        desk = make_support_desk()
        return Agent(ScriptedModel([]), desk.tools, answer_check=lambda text, state: "refused")

    found = routes(factory, gate=refund_gate, max_replies=1)
    assert "AnswerRejected" in found and "Answered" not in found
    plain = routes(make_support_desk, gate=refund_gate, max_replies=1)
    assert "Answered" in plain
