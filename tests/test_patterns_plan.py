"""The plan executor: the model plans once; code runs each step through the boundary and stops at the first failure."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm.engine import answer_message, check_machine
from agent_fsm.examples.support_desk import make_support_desk, refund_gate
from agent_fsm.patterns import PLAN_MACHINE, PatternEnding, ScriptedReplies, parse_plan, plan_and_execute

TASK = "My order A-17 came broken. Could you sort this out?"
LOOKUP = {"tool": "lookup_order", "arguments": {"order_id": "A-17"}}
OVER = {"tool": "refund_order", "arguments": {"order_id": "A-17", "amount_cents": 9999}}
RIGHT = {"tool": "refund_order", "arguments": {"order_id": "A-17", "amount_cents": 4999}}
POLICY = {"tool": "read_policy", "arguments": {}}


def _planner(*plans):
    return ScriptedReplies([answer_message(p if isinstance(p, str) else json.dumps(p)) for p in plans])


def _run(*plans, gate=refund_gate, **options):
    desk = make_support_desk()
    return plan_and_execute(TASK, _planner(*plans), desk.tools, gate=gate, **options), desk


def test_the_plan_stops_at_its_denied_step_and_later_steps_never_run():
    """Plan v1 (lookup, refund 9999, read policy): step 2 is denied, step 3 never runs, nothing is refunded."""
    result, desk = _run([LOOKUP, OVER, POLICY])
    assert result.ending is PatternEnding.STEP_DENIED
    assert [(o.call_id, o.kind) for o in result.observations] == [("p1s1", "result"), ("p1s2", "denied")]
    assert desk.effects == []
    assert result.output is None and "refund_order [p1s2] came back denied" in result.reason
    assert (result.spend.model_calls, result.spend.tool_calls) == (1, 2)


def test_a_replan_sees_the_failure_and_the_corrected_plan_lands_the_refund():
    """With one replan the planner proposes v2 (refund 4999); exactly one correct receipt lands."""
    planner = _planner([LOOKUP, OVER], [RIGHT])
    desk = make_support_desk()
    result = plan_and_execute(TASK, planner, desk.tools, gate=refund_gate, replans=1)
    assert result.ending is PatternEnding.REPLIED
    assert desk.effects == [{"order_id": "A-17", "refunded_cents": 4999}]
    assert result.output == "Plan v2 completed 1 of 1 steps: refund_order[p2s1]."
    assert [json.loads(d) for d in result.drafts] == [[LOOKUP, OVER], [RIGHT]]


def test_the_replan_budget_ends_the_loop():
    """A planner that keeps proposing the denied refund is stopped once its replans are spent."""
    result, desk = _run([OVER], [OVER], [OVER], [OVER], replans=2)
    assert result.ending is PatternEnding.STEP_DENIED
    assert result.spend.model_calls == 3 and desk.effects == []


def test_an_invalid_step_and_a_failing_handler_are_step_failed():
    """Arguments breaking the contract, or a handler that raises, stop the plan as step_failed."""
    bad = {"tool": "refund_order", "arguments": {"order_id": "A-17", "amount_cents": "lots"}}
    invalid, desk = _run([LOOKUP, bad, RIGHT])
    assert invalid.ending is PatternEnding.STEP_FAILED and invalid.observations[-1].kind == "invalid"
    assert desk.effects == []
    missing, _ = _run([{"tool": "lookup_order", "arguments": {"order_id": "Z-9"}}, RIGHT])
    assert missing.ending is PatternEnding.STEP_FAILED and missing.observations[-1].kind == "error"
    assert len(missing.observations) == 1


def test_the_secure_default_denies_a_planned_refund():
    """With no gate, an effectful step is refused when its turn comes, however the plan was written."""
    result, desk = _run([LOOKUP, RIGHT], gate=None)
    assert result.ending is PatternEnding.STEP_DENIED and desk.effects == []


@pytest.mark.parametrize(
    "reply",
    ["I would look the order up first.", "[]", '{"tool": "lookup_order"}', '[{"tool": "x"}]', json.dumps([LOOKUP] * 9)],
)
def test_a_reply_that_is_not_a_plan_is_rejected_and_nothing_runs(reply):
    """Prose, an empty plan, a step missing its arguments, or too many steps: plan_rejected, no tool call."""
    result, _ = _run(reply)
    assert result.ending is PatternEnding.PLAN_REJECTED
    assert result.observations == () and result.spend.tool_calls == 0
    assert result.reason.startswith("plan v1 rejected")


def test_an_unreachable_planner_is_a_provider_error():
    """The planner's provider failing ends provider_error, with no plan made up."""
    desk = make_support_desk()
    result = plan_and_execute(TASK, ScriptedReplies([TimeoutError("no reply")]), desk.tools, gate=refund_gate)
    assert result.ending is PatternEnding.PROVIDER_ERROR and result.observations == ()


@pytest.mark.parametrize(
    ("option", "value"), [("replans", -1), ("replans", True), ("max_steps", 0), ("max_steps", 1.5)]
)
def test_bad_options_are_refused(option, value):
    """Budgets are whole numbers, checked before the model is asked."""
    with pytest.raises(ValueError, match=option):
        plan_and_execute(TASK, _planner([LOOKUP]), make_support_desk().tools, **{option: value})


def test_the_plan_machine_passes_the_static_checker_and_needs_its_replan_budget():
    """Proved to terminate; without the replan edge's budget the Stepping-Planning cycle is reported."""
    assert check_machine(PLAN_MACHINE).ok
    edges = tuple(
        attrs.evolve(e, consumes=None) if e.dest == "Planning" and e.source == "Stepping" else e
        for e in PLAN_MACHINE.edges
    )
    report = check_machine(attrs.evolve(PLAN_MACHINE, edges=edges))
    assert not report.ok
    assert any("Planning" in v.states and "Stepping" in v.states for v in report.violations)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
_NEAR_STEPS = st.dictionaries(
    st.sampled_from(["tool", "arguments", "why"]), _JSON | st.just("lookup_order"), max_size=3
)
_STEPS = st.fixed_dictionaries({"tool": _JSON | st.text(max_size=12), "arguments": _JSON})
_REPLIES = st.one_of(
    st.lists(_STEPS, min_size=1, max_size=9).map(json.dumps),
    st.text(max_size=120),
    _JSON.map(json.dumps),
    st.lists(_NEAR_STEPS | _JSON, max_size=10).map(json.dumps),
)


@given(_REPLIES)
def test_parse_plan_never_raises_and_returns_only_well_formed_steps(text):
    """Any reply text is a plan of (name, arguments) pairs or a reason; parsing never raises."""
    steps, problem = parse_plan(text, 8)
    assert (steps is None) != (problem is None)
    if steps is not None:
        assert 1 <= len(steps) <= 8
        assert all(isinstance(name, str) and isinstance(arguments, dict) for name, arguments in steps)
