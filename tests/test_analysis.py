"""Tests for the static checker: the shipped machines pass; each broken property is caught and named."""

from __future__ import annotations

import pytest

from agent_fsm import RUN_MACHINE, Edge, MachineSpec, StateSpec
from agent_fsm.diagrams.catalog import machines
from agent_fsm.engine import MachineReport, check_machine

END = StateSpec("End", "absorbing", "done", stop="answered")


def _spec(states: tuple[StateSpec, ...], edges: tuple[Edge, ...], budgets: dict[str, str] | None = None) -> MachineSpec:
    return MachineSpec(name="toy", initial="A", states=states, edges=edges, budgets=budgets or {"n": "a counter"})


def _rules(report: MachineReport) -> dict[str, list[tuple[str, ...]]]:
    found: dict[str, list[tuple[str, ...]]] = {}
    for violation in report.violations:
        found.setdefault(violation.rule, []).append(violation.states)
    return found


def test_run_machine_is_proved_to_terminate() -> None:
    """The run machine has no violation: every state reachable, every cycle budgeted, absorbing states closed."""
    report = check_machine(RUN_MACHINE)
    assert report.ok, str(report)
    assert report.violations == ()
    assert "all checks hold" in str(report)


@pytest.mark.parametrize("name", sorted(machines()))
def test_every_shipped_machine_passes(name: str) -> None:
    """Every machine in the catalog passes the four termination checks."""
    report = check_machine(machines()[name])
    assert report.ok, str(report)


def test_unreachable_state_is_named() -> None:
    """A state no edge leads to is reported as unreachable, by name."""
    spec = _spec(
        (StateSpec("A", "working"), StateSpec("Orphan", "working"), END),
        (Edge("A", "go", "End"), Edge("Orphan", "go", "End")),
    )
    report = check_machine(spec)
    assert _rules(report) == {"reachable": [("Orphan",)]}
    assert "'Orphan' cannot be reached from 'A'" in str(report)


def test_state_without_path_to_an_ending_is_named() -> None:
    """A working state that can only loop (even on a budget) is reported: no path reaches an absorbing state."""
    spec = _spec(
        (StateSpec("A", "working"), StateSpec("Trap", "working"), END),
        (
            Edge("A", "go", "Trap", guard="trapped"),
            Edge("A", "go", "End"),
            Edge("Trap", "spin", "Trap", consumes="n"),
        ),
    )
    report = check_machine(spec)
    assert _rules(report) == {"can_end": [("Trap",)]}
    assert "no path leads from 'Trap' to an absorbing state" in str(report)


def test_edge_out_of_an_absorbing_state_is_named() -> None:
    """An edge leaving an absorbing state is reported with the state and the edge itself."""
    leaving = Edge("End", "restart", "A", consumes="n")
    spec = _spec((StateSpec("A", "working"), END), (Edge("A", "go", "End"), leaving))
    report = check_machine(spec)
    assert _rules(report) == {"absorbing": [("End",)]}
    assert report.violations[0].edges == (leaving,)
    assert "End --restart--> A" in report.violations[0].message


def test_unbudgeted_cycle_is_named_with_its_edges() -> None:
    """A cycle no edge of which consumes a budget is reported with its states and its edges."""
    there = Edge("A", "step", "B")
    back = Edge("B", "step", "A", guard="again")
    spec = _spec(
        (StateSpec("A", "working"), StateSpec("B", "working"), END),
        (there, back, Edge("B", "step", "End")),
    )
    report = check_machine(spec)
    assert _rules(report) == {"budgeted_cycles": [("A", "B")]}
    violation = report.violations[0]
    assert set(violation.edges) == {there, back}
    assert "A -> B" in violation.message and "B --step [again]--> A" in violation.message


def test_budget_on_one_edge_breaks_the_cycle() -> None:
    """The same cycle passes once one of its edges consumes a declared budget."""
    spec = _spec(
        (StateSpec("A", "working"), StateSpec("B", "working"), END),
        (Edge("A", "step", "B", consumes="n"), Edge("B", "step", "A", guard="again"), Edge("B", "step", "End")),
    )
    assert check_machine(spec).ok


def test_self_loop_without_budget_is_a_cycle() -> None:
    """A state looping on itself without spending a budget is an unbounded cycle."""
    spec = _spec(
        (StateSpec("A", "working"), END),
        (Edge("A", "wait", "A", guard="not_yet"), Edge("A", "wait", "End")),
    )
    assert _rules(check_machine(spec)) == {"budgeted_cycles": [("A",)]}


def test_every_violation_is_reported_at_once() -> None:
    """A machine broken in several ways reports every broken rule in one report."""
    spec = _spec(
        (StateSpec("A", "working"), StateSpec("Orphan", "working"), END),
        (Edge("A", "go", "A"), Edge("Orphan", "go", "End"), Edge("End", "again", "End", consumes="n")),
    )
    rules = _rules(check_machine(spec))
    assert set(rules) == {"reachable", "can_end", "absorbing", "budgeted_cycles"}
    assert ("A",) in rules["can_end"] and ("Orphan",) in rules["reachable"]


def test_all_guarded_state_is_a_warning_not_a_violation() -> None:
    """A working state whose edges are all guarded is warned about, and the report stays ok."""
    spec = _spec(
        (StateSpec("A", "working"), END, StateSpec("Other", "absorbing", stop="step_limit")),
        (Edge("A", "go", "End", guard="good"), Edge("A", "go", "Other", guard="bad")),
    )
    report = check_machine(spec)
    assert report.ok
    assert [w.states for w in report.warnings] == [("A",)]
    assert "warning [fallback]" in str(report) and "good, bad" in str(report)


def test_unguarded_fallback_silences_the_warning() -> None:
    """With an unguarded last edge there is nothing to warn about."""
    spec = _spec(
        (StateSpec("A", "working"), END, StateSpec("Other", "absorbing", stop="step_limit")),
        (Edge("A", "go", "End", guard="good"), Edge("A", "go", "Other")),
    )
    assert check_machine(spec).warnings == ()


def test_run_machine_warns_only_about_proposing() -> None:
    """The run machine's only all-guarded state is Proposing, whose guards cover every judgement."""
    assert [w.states for w in check_machine(RUN_MACHINE).warnings] == [("Proposing",)]
