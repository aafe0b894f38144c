"""The kit's nested worlds: the checker passes sound runs and names what a tampered one broke."""

from __future__ import annotations

from typing import Any

import pytest

from agent_fsm import Limits, ScriptedModel, answer_message, tool_call_message
from agent_fsm.testing import (
    NESTED_INVARIANTS,
    InvariantViolation,
    NestedOutcome,
    TableGate,
    assert_nested_invariants,
    check_nesting,
    default_settings,
    drive_nested,
    nested_world,
    nested_worlds,
)


def _three_deep(bottom_gate: str = "ask") -> Any:
    """Level 0 runs level 1, which runs level 2, whose write waits on a person."""
    models = [
        ScriptedModel([tool_call_message("a", "agent_1", {"task": "go"}), answer_message("top done")]),
        ScriptedModel([tool_call_message("b", "agent_2", {"task": "go"}), answer_message("middle done")]),
        ScriptedModel([tool_call_message("w", "write_2", {"n": 4}), answer_message("bottom done")]),
    ]
    gates = [TableGate({"agent_1": "allow"}), TableGate({"agent_2": "allow"}), TableGate({"write_2": bottom_gate})]
    return nested_world(models, gates, [Limits(max_turns=10), Limits(max_turns=6), Limits(max_turns=4)])


def test_a_decision_three_levels_down_is_checked_and_holds() -> None:
    world = _three_deep()
    outcome = drive_nested(world, lambda result: True)
    assert [d.path for d in outcome.decisions] == [("a", "b", "w")]
    assert outcome.decisions[0].run_id == "run/a/b"
    assert world.effects == [
        {"agent": "level2", "run_id": "run/a/b", "call_id": "w", "tool": "write_2", "arguments": {"n": 4}}
    ]
    assert outcome.result.answer == "top done" and world.depth == 3
    assert_nested_invariants(outcome)


def _broken(outcome: NestedOutcome, invariant: str) -> None:
    with pytest.raises(InvariantViolation) as caught:
        assert_nested_invariants(outcome)
    assert caught.value.invariant == invariant, caught.value


def test_an_effect_no_gate_allowed_is_caught() -> None:
    outcome = drive_nested(_three_deep(), lambda result: True)
    outcome.decisions.clear()  # as if nobody had approved the write
    _broken(outcome, "effect_gated")


def test_an_effect_that_ran_at_another_level_is_caught() -> None:
    outcome = drive_nested(_three_deep(), lambda result: True)
    outcome.world.effects[0] = {**outcome.world.effects[0], "run_id": "run/a"}
    _broken(outcome, "effect_gated")


def test_an_approval_that_ran_another_call_is_caught() -> None:
    outcome = drive_nested(_three_deep(), lambda result: True)
    attempts = outcome.world.attempts
    attempts[-1] = {**attempts[-1], "arguments": {"n": 5}}  # the approved write ran with other arguments
    _broken(outcome, "decision_covers_call")


def test_a_child_charged_wrongly_is_caught() -> None:
    outcome = drive_nested(_three_deep(), lambda result: True)
    outcome.result.state.children["a"].turns -= 1
    _broken(outcome, "charged_to_parent")


def test_a_child_over_what_its_parent_had_left_is_caught() -> None:
    outcome = drive_nested(_three_deep(), lambda result: True)
    top = outcome.result.state
    top.turns += 20
    top.children["a"].turns += 20  # as if the child had run past the parent's ten turns, and been charged
    _broken(outcome, "nested_budgets")


def test_a_lost_child_is_caught() -> None:
    outcome = drive_nested(_three_deep(), lambda result: True)
    del outcome.result.state.children["a"].children["b"]
    _broken(outcome, "children_kept")


def test_a_run_left_paused_is_caught() -> None:
    outcome = drive_nested(_three_deep(), lambda result: True)
    paused = _three_deep().top.run("task", run_id="run")
    outcome.result = paused
    _broken(outcome, "ends_absorbing")


def test_check_nesting_runs_random_worlds_and_decisions() -> None:
    check_nesting(nested_worlds(2), settings=default_settings(max_examples=25, derandomize=True, database=None))


def test_every_nested_invariant_is_a_kit_invariant() -> None:
    assert set(NESTED_INVARIANTS) >= {"nested_budgets", "effect_gated", "decision_covers_call", "decided_once"}


def test_nested_worlds_refuse_an_empty_range() -> None:
    with pytest.raises(ValueError, match="min_depth"):
        nested_worlds(2, min_depth=3)
    with pytest.raises(ValueError, match="one model, gate and limits per level"):
        nested_world([ScriptedModel([])], [], [Limits()])
