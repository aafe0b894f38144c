"""
The watchdog and the dynamic termination check, on broken machines the static checker passes.

Each broken machine below is proved to terminate by agent_fsm.engine.check_machine
(its cycles carry ``consumes=`` labels), yet runs for ever: the kit's
checks must fail it, naming the path walked, instead of hanging.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st

from agent_fsm import Limits, MachineSpec, compile_machine, tool_call_message
from agent_fsm.engine import Edge, StateSpec, check_machine
from agent_fsm.examples.support_desk import make_support_desk
from agent_fsm.testing import (
    InvariantViolation,
    check_driver,
    check_machine_terminates,
    drive,
    drive_machine,
    transition_bound,
    watchdog_calls,
    world_of,
)

FAST = settings(max_examples=30, database=None, derandomize=True, phases=[p for p in Phase if p is not Phase.explain])


@attrs.define
class Retry:
    """A run of the retry machines: attempts spent, attempts allowed, and a counter a guard may read by mistake."""

    limit: int
    attempts: int = 0
    other: int = 0
    machine_state: str = "Trying"


def _machine(guard: str, effect: str) -> Any:
    """Trying --retry [guard] consumes attempts--> Trying, else Done; entering Trying runs ``effect``."""
    spec = MachineSpec(
        name=f"retry_{guard}_{effect}",
        initial="Trying",
        budgets={"attempts": "tries, at most the run's limit"},
        states=(
            StateSpec("Trying", "working", "One attempt is made.", on_enter=(effect,)),
            StateSpec("Done", "absorbing", "No attempts left.", stop="done"),
        ),
        edges=(
            Edge("Trying", "retry", "Trying", guard=guard, consumes="attempts"),
            Edge("Trying", "retry", "Done"),
        ),
    )
    vocabulary = {
        "attempts_left": lambda r: r.attempts < r.limit,
        "other_left": lambda r: r.other < r.limit,  # tests the wrong counter
        "count_attempt": lambda r: setattr(r, "attempts", r.attempts + 1),
        "count_nothing": lambda r: None,
    }
    return spec, compile_machine(spec, {k: vocabulary[k] for k in (guard, effect)})


COUNTERS = {"attempts": lambda r: r.attempts}
RUNS = st.builds(Retry, st.integers(0, 5))


def test_sound_machine_passes_both_checks() -> None:
    """A guard testing the counter its effect grows: the static proof and the dynamic check agree."""
    spec, machine = _machine("attempts_left", "count_attempt")
    assert check_machine(spec).ok
    check_machine_terminates(machine, RUNS, counters=COUNTERS, limits=lambda r: {"attempts": r.limit}, settings=FAST)
    path = drive_machine(machine, Retry(limit=2), counters=COUNTERS, limits={"attempts": 2})
    assert path == ["Trying", "Trying", "Trying", "Done"]


def test_guard_testing_the_wrong_counter_fails_the_budget_bound() -> None:
    """The static checker trusts the label; along the path the budget passes its limit, and the path is named."""
    spec, machine = _machine("other_left", "count_attempt")
    assert check_machine(spec).ok
    with pytest.raises(InvariantViolation) as caught:
        check_machine_terminates(
            machine, RUNS, counters=COUNTERS, limits=lambda r: {"attempts": r.limit}, settings=FAST
        )
    assert caught.value.invariant == "budget_bound"
    assert "attempts" in caught.value.detail and "Trying -> Trying" in caught.value.detail


def test_effect_that_forgets_to_count_fails_the_ranking_check() -> None:
    """A cycle labelled ``consumes=attempts`` whose effect counts nothing: no budget grows round the cycle."""
    spec, machine = _machine("attempts_left", "count_nothing")
    assert check_machine(spec).ok
    with pytest.raises(InvariantViolation) as caught:
        drive_machine(machine, Retry(limit=1), counters=COUNTERS, limits={"attempts": 1})
    assert caught.value.invariant == "budgeted_cycle"
    assert "Trying -> Trying" in caught.value.detail and "attempts 0 -> 0" in caught.value.detail


def test_watchdog_stops_a_machine_whose_budget_has_no_limit() -> None:
    """
    A counter that grows every cycle but has no limit given: only the watchdog
    can stop the run, at its bound, with the path so far.
    """
    _, machine = _machine("other_left", "count_attempt")
    with pytest.raises(InvariantViolation) as caught:
        drive_machine(machine, Retry(limit=1), counters=COUNTERS, limits={}, max_transitions=25)
    assert caught.value.invariant == "bounded_run"
    assert "took 25 transitions" in caught.value.detail and "Trying -> Trying" in caught.value.detail


def test_bound_comes_from_the_limits() -> None:
    """The default watchdog bound grows with the limits: each state may come round once per unit of budget."""
    spec, _ = _machine("attempts_left", "count_attempt")
    assert transition_bound(spec, {"attempts": 3}) == 2 * 4
    assert transition_bound(spec, {"attempts": 10}) > transition_bound(spec, {"attempts": 3})


def test_counters_must_name_declared_budgets() -> None:
    """A counter for a budget the machine does not declare is a programmer error, said as such."""
    _, machine = _machine("attempts_left", "count_attempt")
    with pytest.raises(TypeError, match="unknown"):
        drive_machine(machine, Retry(limit=1), counters={"retries": lambda r: 0}, limits={})


class Chatty:
    """A model that never stops proposing a lookup."""

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        return tool_call_message(f"c{len(messages)}", "lookup_order", {"order_id": "A-17"})


def endless_loop(task: str, model: Any, tools: Any, *, gate: Any, limits: Limits) -> Any:
    """A run loop that skips every budget check: it asks again after every reply, for ever."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    while True:
        messages.append(model.chat(messages))


def test_watchdog_stops_a_driver_that_never_ends() -> None:
    """drive() stops a loop that skips every budget check at the watchdog's bound, showing the transcript."""
    with pytest.raises(InvariantViolation) as caught:
        drive(
            Chatty(),
            world_of(make_support_desk()),
            gate=lambda c: (True, "ok"),
            limits=Limits(max_turns=3),
            driver=endless_loop,
        )
    assert caught.value.invariant == "bounded_run"
    assert f"asked the model {watchdog_calls(Limits(max_turns=3)) + 1} times under max_turns=3" in caught.value.detail


def test_check_driver_fails_an_endless_loop_instead_of_hanging() -> None:
    """The one-call check of a run loop fails the endless loop (the suite would hang without the watchdog)."""
    with pytest.raises(InvariantViolation) as caught:
        check_driver(endless_loop, make_support_desk, settings=FAST)
    assert caught.value.invariant == "bounded_run"


def test_watchdog_never_trips_on_the_engine() -> None:
    """The engine's own driver stays inside the watchdog's bound whatever the limits."""
    outcome = drive(Chatty(), world_of(make_support_desk()), gate=lambda c: (True, "ok"), limits=Limits(max_turns=4))
    assert outcome.result.stop.value == "step_limit"
