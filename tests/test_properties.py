"""The engine's property tests: whatever the model proposes, the gate says or the human decides, rules hold."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agent_fsm import (
    Limits,
    NotPaused,
    RunState,
    ScriptedModel,
    Stop,
    advance,
    check_run,
    resume,
    run,
)
from agent_fsm.engine import DEFAULT_LAST_WORD, RUN_MACHINE, tool_call_message
from agent_fsm.examples.support_desk import make_support_desk, refund_gate
from agent_fsm.testing import (
    TableGate,
    assert_run_invariants,
    gates,
    limits,
    run_harness,
    scripted_models,
    tool_calls,
    world_of,
)
from tests.strategies import make_ledger

WORLDS: dict[str, Callable[[], Any]] = {"support_desk": make_support_desk, "ledger": make_ledger}
ABSORBING = {Stop(s.stop) for s in RUN_MACHINE.states if s.kind == "absorbing"}
# Strategies are built once per world (building them costs more than a run); each example gets a fresh world.
REGISTRIES = {name: world_of(make()).tools for name, make in WORLDS.items()}
MODELS = {name: scripted_models(tools) for name, tools in REGISTRIES.items()}
GATES = {name: gates(tools) for name, tools in REGISTRIES.items()}
LIMITS = limits()


@pytest.mark.parametrize("world", sorted(WORLDS))
@given(data=st.data())
def test_every_run_ends_absorbing_within_budgets(world: str, data: st.DataObject) -> None:
    """Random scripts, gates, limits and approvals: every rest round-trips through JSON, the run ends absorbing,
    within every budget, invariants intact, and an ended run does not move again."""
    made = world_of(WORLDS[world]())
    model = data.draw(MODELS[world], label="model")
    gate = data.draw(GATES[world], label="gate")
    chosen = data.draw(LIMITS, label="limits")
    result = run("task", model, made.tools, gate=gate, limits=chosen)
    approved = []
    while True:
        state = result.state
        loaded = RunState.from_json(state.to_json())
        assert loaded == state and loaded.to_json() == state.to_json()
        if result.stop is not Stop.AWAITING_APPROVAL:
            break
        approve = data.draw(st.booleans(), label="approve")
        if approve and result.blocked_on is not None:
            approved.append(result.blocked_on.call_id)
        result = resume(state, model, made.tools, approve=approve, gate=gate, limits=chosen)
    assert result.stop in ABSORBING
    assert state.turns <= chosen.max_turns
    assert chosen.max_tool_calls is None or state.tool_attempts <= chosen.max_tool_calls
    assert all(tokens <= chosen.max_prompt_tokens for tokens in state.prompt_token_log)
    assert all(check_run(result, made.effects, chosen).values()), check_run(result, made.effects, chosen)
    assert_run_invariants(result, made.effects, chosen, tools=made.tools, gate=gate, approved=approved)
    before = copy.deepcopy(state)
    again = advance(state, ScriptedModel([]), made.tools, gate=gate, limits=chosen)
    assert state == before and again.stop is result.stop
    with pytest.raises(NotPaused):
        resume(state, ScriptedModel([]), made.tools, approve=True, limits=chosen)
    assert state == before


EFFECTFUL_CALLS = {
    name: tool_calls({n: t for n, t in tools.items() if t.effectful}, call_id="call_first")
    for name, tools in REGISTRIES.items()
}
ROOMY_LIMITS = limits(max_turns=(1, 8), max_prompt_tokens=(800, 3000))


@st.composite
def _paused_runs(draw: st.DrawFn, name: str) -> tuple[list[dict[str, Any]], TableGate, Limits]:
    """A script opening with a valid effectful call under a gate that asks about effects, so runs pause."""
    first = draw(EFFECTFUL_CALLS[name])
    opening = tool_call_message(first.call_id, first.name, first.arguments or {})
    rest = draw(MODELS[name]).turns
    gate = draw(GATES[name])
    effectful = [n for n, t in REGISTRIES[name].items() if t.effectful]
    gate = TableGate({**gate.table, **{n: "ask" for n in effectful}}, gate.default)
    chosen = draw(ROOMY_LIMITS)
    return [opening, *rest], gate, chosen


def _model(turns: list[dict[str, Any]]) -> ScriptedModel:
    """The drawn script, answering the last word past it (a random script need not end)."""
    return ScriptedModel(turns, last_word=DEFAULT_LAST_WORD)


# Each example runs two worlds side by side and resumes at every pause: half the profile's examples.
@pytest.mark.parametrize("world", sorted(WORLDS))
@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(data=st.data())
def test_resuming_a_loaded_copy_ends_as_resuming_in_memory(world: str, data: st.DataObject) -> None:
    """A paused run saved to JSON, loaded in a fresh world and resumed ends exactly as the one resumed in memory."""
    turns, gate, chosen = data.draw(_paused_runs(world))
    live, saved = world_of(WORLDS[world]()), world_of(WORLDS[world]())
    live_result = run("task", _model(turns), live.tools, gate=gate, limits=chosen)
    assume(live_result.stop is Stop.AWAITING_APPROVAL)
    text = live_result.state.to_json()
    saved.effects.extend(copy.deepcopy(live.effects))  # the effects that landed before the pause
    saved_result = live_result
    pauses = 0
    while live_result.stop is Stop.AWAITING_APPROVAL:
        approve = data.draw(st.booleans(), label="approve")
        live_result = resume(live_result.state, _model(turns), live.tools, approve=approve, gate=gate, limits=chosen)
        saved_state = RunState.from_json(text)
        saved_result = resume(saved_state, _model(turns), saved.tools, approve=approve, gate=gate, limits=chosen)
        text = saved_result.state.to_json()
        pauses += 1
    assert pauses >= 1
    assert saved_result.state == live_result.state
    assert (saved_result.stop, saved_result.answer, saved_result.reason) == (
        live_result.stop,
        live_result.answer,
        live_result.reason,
    )
    assert saved.effects == live.effects


SupportDeskRun = run_harness(
    make_support_desk, gate=refund_gate, limits=Limits(max_turns=6, max_tool_calls=4), name="SupportDeskRun"
)
TestSupportDeskRun = SupportDeskRun.TestCase
# Each stateful step replays the run so far: a twentieth of the profile's examples, shorter programs. On top
# of the kit's own settings (no health checks: a paused or ended run leaves one or two rules whose
# preconditions hold, and Hypothesis counts every rule it skips as a filtered input).
HARNESS_SETTINGS = settings(
    TestSupportDeskRun.settings, max_examples=max(10, settings.default.max_examples // 20), stateful_step_count=20
)
TestSupportDeskRun.settings = HARNESS_SETTINGS


def _ledger_gate(context: Any) -> Any:
    """Reads run; credits ask a human; tagging is allowed."""
    from agent_fsm import Verdict

    def gate(call: Any) -> Verdict:
        if call.name == "issue_credit":
            return Verdict.ask("credits need a human")
        return Verdict.allow("ok")

    return gate


LedgerRun = run_harness(
    make_ledger,
    gate_factory=_ledger_gate,
    limits=Limits(max_turns=5, max_prompt_tokens=2500, max_tool_calls=5),
    name="LedgerRun",
)
TestLedgerRun = LedgerRun.TestCase
TestLedgerRun.settings = HARNESS_SETTINGS
