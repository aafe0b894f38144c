"""The support desk as a scenario environment: its checks, gates and the plan-then-execute policy."""

from __future__ import annotations

from agent_fsm import Limits, ScriptedModel, Stop, answer_message, tool_call_message
from agent_fsm.examples.support_desk import (
    SYSTEM_PROMPT,
    TASK,
    PlanningModel,
    environment,
    make_support_desk,
    refund_gate,
    support_agent,
)


def test_process_check_rejects_a_refund_without_a_lookup() -> None:
    """A refund that ran before any lookup fails lookup_before_refund, though the outcome check holds."""
    env = environment()
    model = ScriptedModel(
        [
            tool_call_message("c1", "refund_order", {"order_id": "A-17", "amount_cents": 4999}),
            answer_message("Refunded."),
        ]
    )
    result = env.agent(model, gate=env.gates["refund"]).run(TASK)
    assert env.checks["refund_verified"](result) is True
    assert env.checks["lookup_before_refund"](result) is False


def test_refund_verified_needs_exactly_one_receipt() -> None:
    """Two refunds of 4999 are not the one intended receipt."""
    env = environment()
    refund = tool_call_message("c1", "refund_order", {"order_id": "A-17", "amount_cents": 4999})
    model = ScriptedModel([refund, refund, answer_message("Refunded.")])
    result = env.agent(model, gate=env.gates["refund"]).run(TASK)
    assert len(env.effects) == 2
    assert env.checks["refund_verified"](result) is False


def test_manager_gate_asks_instead_of_denying() -> None:
    """The manager gate pauses an over-limit refund for a human; within the limit it allows."""
    env = environment()
    model = ScriptedModel([tool_call_message("c1", "refund_order", {"order_id": "A-17", "amount_cents": 9999})])
    result = env.agent(model, gate=env.gates["manager"]).run(TASK)
    assert result.stop is Stop.AWAITING_APPROVAL
    assert result.blocked_on is not None and result.blocked_on.arguments == {"order_id": "A-17", "amount_cents": 9999}
    assert env.effects == []


def test_support_agent_is_a_model_at_the_desk() -> None:
    """The desk's tools, refund_gate by default (another if given), the shop's prompt, the limits asked for."""
    desk = make_support_desk()
    model = ScriptedModel([answer_message("hello")])
    agent = support_agent(desk, model, limits=Limits(max_turns=3))
    assert (agent.model, agent.tools, agent.gate) == (model, desk.tools, refund_gate)
    assert agent.system_prompt == SYSTEM_PROMPT and agent.limits == Limits(max_turns=3)
    assert support_agent(desk, model, gate=environment().gates["manager"]).gate is not refund_gate


def test_each_environment_is_a_fresh_world() -> None:
    """Effects of one environment never leak into the next."""
    first = environment()
    first.tools["refund_order"].handler(order_id="A-17", amount_cents=1)
    assert environment().effects == [] and first.effects != []


def test_planner_stops_at_the_first_failed_step_and_replans() -> None:
    """Step 3 of the first plan is never proposed after step 2 is denied; the replan runs instead."""
    plans = [
        [
            ("lookup_order", {"order_id": "A-17"}),
            ("refund_order", {"order_id": "A-17", "amount_cents": 9999}),
            ("read_policy", {}),
        ],
        [("refund_order", {"order_id": "A-17", "amount_cents": 4999})],
    ]
    desk = make_support_desk()
    result = support_agent(desk, PlanningModel(plans, "done")).run(TASK)
    names = [m["tool_calls"][0]["function"]["name"] for m in result.state.messages if m.get("tool_calls")]
    assert names == ["lookup_order", "refund_order", "refund_order"]
    assert result.state.messages[2]["content"].startswith("Plan v1: 1) lookup_order")
    assert desk.effects == [{"order_id": "A-17", "refunded_cents": 4999}]
    assert result.answer == "done"


def test_planner_without_a_replan_says_where_it_stopped() -> None:
    """With no plan left, the policy answers with the failed step and its reason."""
    plans = [[("refund_order", {"order_id": "A-17", "amount_cents": 9999}), ("read_policy", {})]]
    desk = make_support_desk()
    result = support_agent(desk, PlanningModel(plans, "unused")).run(TASK)
    assert result.stop is Stop.ANSWERED
    assert "plan v1 stopped at step 1 of 2 (denied: refunds above 5000 cents need a manager)" in (result.answer or "")
    assert result.state.tool_attempts == 0


def test_planner_reads_foreign_tool_text_as_no_failure() -> None:
    """A tool message that is not the engine's JSON (from earlier history) does not end a plan."""
    planner = PlanningModel([[("read_policy", {})]], "done")
    reply = planner.chat(
        [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "plain text"}]
    )
    assert reply["tool_calls"][0]["function"]["name"] == "read_policy"
