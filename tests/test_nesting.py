"""Agents nested in agents, unit by unit: observations, handoffs, budgets, decisions, async, events, hostile states."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from typing import Any

import pytest

from agent_fsm import (
    Agent,
    Ending,
    Limits,
    NotPaused,
    Price,
    Prices,
    RunError,
    RunState,
    ScriptedModel,
    Stop,
    ToolContext,
    ToolSpec,
    Verdict,
    answer_message,
    check_composition,
    tool_call_message,
)
from agent_fsm.engine import ModelRequested, Observation, bounded_limits
from agent_fsm.engine._codecs import NESTING_CEILING
from agent_fsm.engine._state import nested_nonce
from tests.nonces import one_nonce

WRITE = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}


def writer(log: list[dict[str, Any]]) -> ToolSpec:
    """An effectful tool logging the run and call it ran in."""

    def write(n: int, context: ToolContext) -> dict[str, Any]:
        log.append({"run_id": context.run_id, "call_id": context.call_id, "n": n})
        return {"wrote": n}

    return ToolSpec("Write a number.", WRITE, write, effectful=True)


def delegate(tool: str = "child", task: str = "do it", call_id: str = "c0") -> dict[str, Any]:
    return tool_call_message(call_id, tool, {"task": task})


def child_agent(log: list[dict[str, Any]], script: list[dict[str, Any]], **options: Any) -> Agent:
    options.setdefault("gate", lambda call: Verdict("allow", "ok"))
    return Agent(ScriptedModel(script), {"write": writer(log)}, name=options.pop("name", "child"), **options)


def parent_of(child: Agent, script: list[dict[str, Any]], **options: Any) -> Agent:
    options.setdefault("gate", lambda call: Verdict("allow", "ok"))
    return Agent(ScriptedModel(script), {"child": child.as_tool()}, name="parent", **options)


def observation(state: RunState, call_id: str = "c0") -> Any:
    return next(o for o in state.observations if o.call_id == call_id)


# --- the child's ending as the parent's observation ---


def test_an_answered_child_is_the_calls_result() -> None:
    log: list[dict[str, Any]] = []
    child = child_agent(log, [tool_call_message("w", "write", {"n": 1}), answer_message("wrote one")])
    result = parent_of(child, [delegate(), answer_message("done")]).run("task", run_id="R")
    seen = observation(result.state)
    assert (result.stop, seen.ok, seen.kind, seen.content) == (Stop.ANSWERED, True, "result", "wrote one")
    assert log == [{"run_id": "R/c0", "call_id": "w", "n": 1}]
    kept = result.state.children["c0"]
    assert kept.run_id == "R/c0" and kept.answer == "wrote one" and kept.machine_state == "Answered"
    assert kept.messages[1] == {"role": "user", "content": "do it"}


def test_a_nested_run_keys_its_calls_under_a_nonce_derived_from_its_parents() -> None:
    """A nested run's nonce comes from its parent's and its call (a replay nests it again alike); keys stay apart."""
    runs = []
    for _ in range(2):
        child = child_agent([], [tool_call_message("w", "write", {"n": 1}), answer_message("wrote one")])
        runs.append(parent_of(child, [delegate(), answer_message("done")]).run("task", run_id="R").state)
    for state in runs:
        nested = state.children["c0"]
        assert nested.nonce == nested_nonce(state.nonce, "c0") and nested.nonce not in ("", state.nonce)
    assert runs[0].children["c0"].nonce != runs[1].children["c0"].nonce  # two runs of one id: two nonces
    assert nested_nonce("", "c0") == ""  # a parent saved before nonces nests runs keyed as they were


def test_a_typed_child_gives_its_output_as_the_result() -> None:
    schema = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}
    child = child_agent([], [answer_message('{"total": 7}')], output=schema)
    result = parent_of(child, [delegate(), answer_message("done")]).run("task")
    assert observation(result.state).kind == "result"
    assert observation(result.state).content == {"total": 7}


def test_a_child_out_of_turns_is_an_error_naming_its_stop_and_code() -> None:
    log: list[dict[str, Any]] = []
    script = [tool_call_message("w", "write", {"n": 1}), answer_message("never said")]
    child = child_agent(log, script, limits=Limits(max_turns=1))
    result = parent_of(child, [delegate(), answer_message("the child ran out")]).run("task")
    seen = observation(result.state)
    assert (seen.ok, seen.kind) == (False, "error")
    assert seen.content["stop"] == "step_limit" and seen.content["code"] == "step_limit"
    assert seen.content["agent"] == "child" and "1 of 1" in seen.content["reason"]
    assert result.stop is Stop.ANSWERED  # the parent reads why, and goes on


def test_a_child_that_no_longer_progresses_is_an_error_with_its_code() -> None:
    refused = tool_call_message("w", "write", {"n": 1})
    child = child_agent(
        [], [refused, refused], gate=lambda call: Verdict("deny", "no writes"), limits=Limits(repeated_denials=1)
    )
    result = parent_of(child, [delegate(), answer_message("ok")]).run("task")
    seen = observation(result.state)
    assert (seen.kind, seen.content["stop"], seen.content["code"]) == ("error", "no_progress", "no_progress")


# --- handoffs ---


def test_a_handoff_ends_the_run_with_the_holders_answer_and_code() -> None:
    billing = Agent(ScriptedModel([answer_message("billed")]), {}, name="billing")
    front = Agent(
        ScriptedModel([tool_call_message("h", "billing", {}), answer_message("never")]),
        {"billing": billing.handoff()},
        gate=lambda call: Verdict("allow", "ok"),
        name="front",
    )
    result = front.run("charge me twice?", run_id="F")
    assert result.stop is Stop.HANDED_OVER and result.answer == "billed" and result.code == "answered"
    held = result.state.children["h"]
    assert held.agent == "billing" and held.run_id == "F/h"
    assert held.messages[-2] == {"role": "user", "content": "charge me twice?"}
    assert "billing" in (result.reason or "")


def test_a_handoff_passes_what_its_filter_leaves() -> None:
    billing = Agent(ScriptedModel([answer_message("billed")]), {}, name="billing")
    passes = lambda messages: [{"role": "user", "content": "only this"}]
    front = Agent(
        ScriptedModel([tool_call_message("h", "billing", {})]),
        {"billing": billing.handoff(passes=passes)},
        gate=lambda call: Verdict("allow", "ok"),
    )
    result = front.run("the whole story")
    held = result.state.children["h"]
    assert [m for m in held.messages if m["role"] == "user"] == [{"role": "user", "content": "only this"}]
    assert "the whole story" not in json.dumps(held.messages)


def test_a_handoff_filter_that_leaves_no_user_message_fails_loudly_with_the_state() -> None:
    billing = Agent(ScriptedModel([answer_message("billed")]), {}, name="billing")
    front = Agent(
        ScriptedModel([tool_call_message("h", "billing", {})]),
        {"billing": billing.handoff(passes=lambda messages: [])},
        gate=lambda call: Verdict("allow", "ok"),
    )
    with pytest.raises(RunError, match="user's message") as caught:
        front.run("task")
    assert caught.value.state is not None and caught.value.state.messages[1]["content"] == "task"


# --- budgets ---


def test_a_child_has_at_most_the_turns_its_parent_has_left() -> None:
    script = [tool_call_message(f"w{i}", "write", {"n": i}) for i in range(10)]
    child = child_agent([], script, limits=Limits(max_turns=10))
    result = parent_of(child, [delegate()], limits=Limits(max_turns=4)).run("task")
    kept = result.state.children["c0"]
    assert kept.limits.max_turns == 3 and kept.turns == 3  # the parent spent one proposing the call
    assert result.state.turns == 4 and result.stop is Stop.STEP_LIMIT


def test_a_child_has_at_most_the_tool_attempts_its_parent_has_left() -> None:
    log: list[dict[str, Any]] = []
    script = [tool_call_message(f"w{i}", "write", {"n": i}) for i in range(6)]
    child = child_agent(log, script, limits=Limits(max_tool_calls=5))
    parent = Agent(
        ScriptedModel([tool_call_message("p", "write", {"n": 9}), delegate(), answer_message("done")]),
        {"write": writer(log), "child": child.as_tool()},
        gate=lambda call: Verdict("allow", "ok"),
        limits=Limits(max_tool_calls=4),
    )
    result = parent.run("task")
    kept = result.state.children["c0"]
    assert kept.limits.max_tool_calls == 2  # four, less the parent's write and the delegation itself
    assert kept.tool_attempts == 2 and result.state.tool_attempts == 4 and len(log) == 3


def test_bounded_limits_takes_the_tighter_of_each_budget() -> None:
    own = Limits(max_turns=9, max_prompt_tokens=5000, max_tool_calls=None, max_seconds=60.0)
    parent = Limits(max_turns=5, max_prompt_tokens=3000, max_tool_calls=4, max_cost=Decimal("2"), max_output_tokens=100)
    state = RunState(turns=2, tool_attempts=1)
    state.usage.cost = Decimal("0.5")
    bounded = bounded_limits(own, parent, state, 12.5)
    assert (bounded.max_turns, bounded.max_prompt_tokens, bounded.max_tool_calls) == (3, 3000, 3)
    assert bounded.max_seconds == 12.5 and bounded.max_cost == Decimal("1.5") and bounded.max_output_tokens == 100
    roomy = Limits(max_turns=50, max_prompt_tokens=9000)
    assert bounded_limits(own, roomy, RunState(), None) is own  # nothing tighter: the child's own


def test_a_child_has_at_most_the_time_its_parent_has_left() -> None:
    child = child_agent([], [answer_message("quick")], limits=Limits(max_seconds=600.0))
    result = parent_of(child, [delegate(), answer_message("done")], limits=Limits(max_seconds=30.0)).run("task")
    given = result.state.children["c0"].limits.max_seconds
    assert given is not None and 0 < given <= 30.0


def test_a_child_spends_its_parents_money_priced_as_its_parent() -> None:
    prices = Prices({}, Price(Decimal("1000"), Decimal("1000")))
    child = child_agent([], [answer_message("cheap")])
    parent = parent_of(
        child,
        [delegate(), answer_message("done")],
        limits=Limits(max_cost=Decimal("5"), max_output_tokens=50),
        prices=prices,
    )
    result = parent.run("task")
    kept = result.state.children["c0"]
    assert kept.limits.max_cost is not None and kept.limits.max_cost < Decimal("5")
    assert kept.usage.cost > 0  # priced by the parent's table, having none of its own
    own = result.state.usage.cost - kept.usage.cost
    assert own > 0 and result.state.usage.cost <= Decimal("5")


def test_a_child_that_would_pass_its_parents_money_stops_cost_limit() -> None:
    prices = Prices({}, Price(Decimal("100000"), Decimal("100000")))
    child = child_agent([], [answer_message("pricey")])
    limits = Limits(max_cost=Decimal("30"), max_output_tokens=50)
    result = parent_of(child, [delegate(), answer_message("done")], limits=limits, prices=prices).run("task")
    kept = result.state.children["c0"]
    assert kept.machine_state == "CostLimit" and kept.usage.cost == 0  # refused before it spent what was left
    assert kept.limits.max_cost == Decimal("30") - result.state.usage.cost
    seen = observation(result.state)
    assert (seen.kind, seen.content["stop"], seen.content["code"]) == ("error", "cost_limit", "cost_limit")
    assert result.stop is Stop.COST_LIMIT and result.state.usage.cost <= Decimal("30")


# --- decisions ---


def test_a_rejection_at_the_top_denies_the_childs_call_and_the_parent_goes_on() -> None:
    log: list[dict[str, Any]] = []
    child = child_agent(
        log,
        [tool_call_message("w", "write", {"n": 1}), answer_message("could not")],
        gate=lambda c: Verdict("ask", "?"),
    )
    paused = parent_of(child, [delegate(), answer_message("parent goes on")]).run("task", run_id="R")
    assert paused.stop is Stop.AWAITING_APPROVAL and paused.blocked_path == ("c0", "w")
    assert paused.blocked_on is not None and paused.blocked_on.arguments == {"n": 1}
    result = parent_of(child, [delegate(), answer_message("parent goes on")]).resume(paused.state, approve=False)
    assert result.stop is Stop.ANSWERED and result.answer == "parent goes on" and log == []
    denied = observation(result.state.children["c0"], "w")
    assert denied.kind == "denied" and "rejected by a human" in denied.content
    assert observation(result.state).content == "could not"
    with pytest.raises(NotPaused):
        parent_of(child, []).resume(paused.state, approve=True)
    assert log == []


def test_an_approval_two_levels_down_runs_exactly_that_call_once() -> None:
    log: list[dict[str, Any]] = []
    top = _three_levels(log, 5)
    paused = top.run("task", run_id="T")
    assert paused.blocked_path == ("c0", "c0", "w") and "bottom waits on write" in (paused.reason or "")
    loaded = RunState.from_json(paused.state.to_json())
    assert loaded == paused.state
    result = top.resume(loaded, approve=True)
    assert result.answer == "t" and log == [{"run_id": "T/c0/c0", "call_id": "w", "n": 5}]
    assert result.state.children["c0"].children["c0"].answer == "b"


def test_the_parents_gate_judges_the_delegation_afresh_at_resume() -> None:
    log: list[dict[str, Any]] = []
    child = child_agent(
        log, [tool_call_message("w", "write", {"n": 1}), answer_message("c")], gate=lambda c: Verdict("ask", "?")
    )
    allowing = {"child": True}

    def gate(call: Any) -> Verdict:
        return Verdict("allow" if allowing.get(call.name) else "deny", "parent's rule")

    parent = parent_of(child, [delegate(), answer_message("p")], gate=gate)
    paused = parent.run("task")
    assert paused.stop is Stop.AWAITING_APPROVAL
    allowing["child"] = False  # the rule changed while the run waited
    result = parent.resume(paused.state, approve=True)
    assert log == []  # the approval does not carry the child's call past the parent's gate
    assert observation(result.state).kind == "denied" and "parent's rule" in observation(result.state).content


# --- async, events ---


def _three_levels(log: list[dict[str, Any]], n: int = 2) -> Agent:
    """top runs middle, which runs bottom, whose write of ``n`` waits for a person."""
    bottom = child_agent(
        log,
        [tool_call_message("w", "write", {"n": n}), answer_message("b")],
        gate=lambda c: Verdict("ask", "?"),
        name="bottom",
    )
    middle = Agent(
        ScriptedModel([delegate("bottom"), answer_message("m")]),
        {"bottom": bottom.as_tool()},
        gate=lambda c: Verdict("allow", "ok"),
        name="middle",
    )
    return Agent(
        ScriptedModel([delegate("middle"), answer_message("t")]),
        {"middle": middle.as_tool()},
        gate=lambda c: Verdict("allow", "ok"),
        name="top",
    )


@one_nonce()
def test_the_async_drivers_give_what_the_sync_ones_give() -> None:
    sync_log: list[dict[str, Any]] = []
    agent = _three_levels(sync_log)
    paused = agent.run("task", run_id="A")
    done = agent.resume(RunState.from_json(paused.state.to_json()), approve=True)

    async def driven() -> tuple[Any, Any, list[Any]]:
        async_log: list[dict[str, Any]] = []
        again = _three_levels(async_log)
        apaused = await again.arun("task", run_id="A")
        adone = await again.aresume(RunState.from_json(apaused.state.to_json()), approve=True)
        streamed = [event async for event in again.astream("task", run_id="A")]
        assert async_log == sync_log
        return apaused, adone, streamed

    apaused, adone, streamed = asyncio.run(driven())
    assert apaused.state.to_json() == paused.state.to_json() and apaused.blocked_path == paused.blocked_path
    assert adone.state.to_json() == done.state.to_json() and adone.answer == done.answer
    assert streamed[-1].result.state.to_json() == paused.state.to_json()


def test_events_of_nested_runs_carry_their_run_id() -> None:
    events: list[Any] = []
    agent = _three_levels([])
    agent.run("task", run_id="E", on_event=events.append)
    requested = [e.run_id for e in events if isinstance(e, ModelRequested)]
    assert requested == ["E", "E/c0", "E/c0/c0"]
    assert {e.run_id for e in events} == {"E", "E/c0", "E/c0/c0"}


# --- the composition, checked ---


def test_check_composition_finds_the_depth_of_a_chain() -> None:
    found = check_composition(_three_levels([]))
    assert found.agents == ("bottom", "middle", "top") and not found.recursive
    assert found.depth_bound == 2 and found.terminates and not found.problems
    assert ("top", "middle", "middle") in found.edges


def test_check_composition_bounds_a_recursive_agent_by_its_turns() -> None:
    tools: dict[str, ToolSpec] = {}
    again = Agent(
        ScriptedModel([delegate("again")]),
        tools,
        gate=lambda c: Verdict("allow", "ok"),
        limits=Limits(max_turns=5),
        name="again",
    )
    tools["again"] = again.as_tool()
    if "again" not in again.tools:
        pytest.skip("an agent keeps a copy of its registry: it cannot name itself")
    found = check_composition(again)
    assert found.recursive and found.depth_bound == 5 and found.terminates
    result = again.run("task")  # it terminates however deep it goes: each level has fewer turns
    assert result.state.turns <= 5 and result.stop is Stop.STEP_LIMIT


# --- hostile saved states ---


def _saved_tree() -> dict[str, Any]:
    paused = _three_levels([]).run("task", run_id="H")
    data: dict[str, Any] = json.loads(paused.state.to_json())
    return data


def test_a_saved_child_must_be_named_for_its_parent_and_call() -> None:
    data = _saved_tree()
    data["children"]["c0"]["run_id"] = "elsewhere"
    with pytest.raises(ValueError, match="children.c0"):
        RunState.from_json(json.dumps(data))


def test_a_saved_child_that_is_not_a_state_is_refused() -> None:
    for hostile in ("a string", [1, 2], {"format": "2"}, {"not": "a state"}, None):
        data = _saved_tree()
        data["children"]["c0"] = hostile
        with pytest.raises(ValueError, match="children"):
            RunState.from_json(json.dumps(data))


def _nested(depth: int) -> str:
    """A saved run with runs nested ``depth`` levels deep, each named for its parent and call."""
    ids = ["x" + "/c" * level for level in range(depth + 1)]
    tree = json.loads(RunState(run_id=ids[-1]).to_json())
    for run_id in reversed(ids[:-1]):
        tree = {**json.loads(_delegated(run_id).to_json()), "children": {"c": tree}}
    return json.dumps(tree)


def _delegated(run_id: str) -> RunState:
    """A run whose one model call proposed the call ``c`` (a run is nested only under a call proposed)."""
    return RunState(
        run_id=run_id,
        messages=[
            {"role": "user", "content": "delegate"},
            tool_call_message("c", "next", {"task": "go on"}),
            {"role": "tool", "tool_call_id": "c", "content": "{}"},
        ],
        opening=1,
        turns=1,
        prompt_token_log=[1],
        observations=[Observation("c", True, "result", {})],
        tool_attempts=1,
    )


def test_runs_nested_deeper_than_the_ceiling_are_refused() -> None:
    assert len(RunState.from_json(_nested(NESTING_CEILING)).children) == 1
    for depth in (NESTING_CEILING + 1, 300):  # 300: deep enough to exhaust the stack, were it read level by level
        with pytest.raises(ValueError, match=f"deeper than {NESTING_CEILING}"):
            RunState.from_json(_nested(depth))


def test_a_child_that_refuses_its_task_is_an_error_with_its_own_code() -> None:
    def refuse(task: Any, state: Any) -> Ending:
        return Ending("out_of_scope", "this agent only handles refunds")

    child = child_agent([], [answer_message("never")], screen_input=refuse)
    result = parent_of(child, [delegate(), answer_message("asked elsewhere")]).run("task")
    seen = observation(result.state)
    assert (seen.kind, seen.content["code"]) == ("error", "out_of_scope")
    assert seen.content["stop"] == "refused" and result.state.children["c0"].machine_state == "Refused"
    assert "only handles refunds" in seen.content["reason"]
    assert result.answer == "asked elsewhere"


def test_a_handoff_whose_holder_refuses_ends_with_the_holders_code() -> None:
    def refuse(task: Any, state: Any) -> Ending:
        return Ending("out_of_scope", "billing only")

    billing = Agent(ScriptedModel([answer_message("never")]), {}, name="billing", screen_input=refuse)
    front = Agent(
        ScriptedModel([tool_call_message("h", "billing", {})]),
        {"billing": billing.handoff()},
        gate=lambda call: Verdict("allow", "ok"),
    )
    result = front.run("task")
    assert result.stop is Stop.HANDED_OVER and result.code == "out_of_scope" and result.answer is None


def test_an_agent_running_itself_stops_nesting_at_the_ceiling_a_saved_state_holds() -> None:
    """Deeper runs could be saved but never loaded again: the call that would nest one more is an error instead."""
    tools: dict[str, ToolSpec] = {}
    script = [tool_call_message("c", "again", {"task": "deeper"}), answer_message("up")]
    agent = Agent(ScriptedModel(script), tools, gate=lambda c: Verdict("allow", "ok"), limits=Limits(max_turns=40))
    tools["again"] = agent.as_tool()
    result = agent.run("go")
    assert result.stop is Stop.ANSWERED
    state, depth = result.state, 0
    while state.children:
        state, depth = state.children["c"], depth + 1
    assert depth == NESTING_CEILING
    refused = state.observations[0]
    assert refused.kind == "error" and refused.content["code"] == "nesting_limit"
    assert RunState.from_json(result.state.to_json()) == result.state
