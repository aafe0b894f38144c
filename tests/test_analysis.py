"""Tests for the static checker: the shipped machines pass; each broken property is caught and named."""

from __future__ import annotations

import attrs
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


# --- each cycle checks the budget it spends, on the cycle itself ---

# The edges that stop a run before a model call is made: turns, then every limit that bounds a model call.
ADMISSION = ("turn_budget_spent", "prompt_over_budget", "time_spent", "cost_over_budget")
LIMIT_EDGES = [e for e in RUN_MACHINE.edges if e.source in ("Ready", "Compacting") and e.guard in ADMISSION]


def _without_edge(machine: MachineSpec, edge: Edge) -> MachineSpec:
    return attrs.evolve(machine, edges=tuple(e for e in machine.edges if e != edge))


@pytest.mark.parametrize("edge", LIMIT_EDGES, ids=lambda e: f"{e.source}->{e.dest}")
def test_deleting_a_limit_edge_is_refused(edge: Edge) -> None:
    """
    With any edge that stops a run before a model call deleted (to StepLimit, TokenLimit, TimeLimit or
    CostLimit, from Ready or Compacting), the model call after it is admitted unchecked: refused.
    """
    report = check_machine(_without_edge(RUN_MACHINE, edge))
    assert not report.ok
    rules = _rules(report)
    assert (edge.source,) in rules["checked_budget"], str(report)
    assert f"[{edge.guard}]" in str(report)
    if edge.guard == "turn_budget_spent":  # the budget the cycle spends, unchecked: the cycle is unbounded too
        assert "budgeted_cycles" in rules, str(report)
        assert f"{edge.source} --{'next_turn' if edge.source == 'Ready' else 'compacted'}--> Proposing" in str(report)


def test_every_edge_the_proof_relies_on_is_needed() -> None:
    """The declared checks of turns are the limits of a model call; each edge guarded by one is needed."""
    assert RUN_MACHINE.spent_guards["turns"] == ADMISSION
    assert len(LIMIT_EDGES) == 8
    assert all(not check_machine(_without_edge(RUN_MACHINE, e)).ok for e in LIMIT_EDGES)


def test_a_limit_edge_tried_after_the_spending_edge_checks_nothing() -> None:
    """The check must come before the spend in table order: Ready's StepLimit edge moved last is refused."""
    edge = LIMIT_EDGES[0]
    edges = [e for e in RUN_MACHINE.edges if e != edge]
    edges.insert(
        edges.index(
            Edge("Ready", "next_turn", "Proposing", consumes="turns", meaning="budget admits another model call")
        )
        + 1,
        edge,
    )
    report = check_machine(attrs.evolve(RUN_MACHINE, edges=tuple(edges)))
    assert ("Ready",) in _rules(report)["checked_budget"], str(report)


def test_a_limit_edge_under_another_guard_checks_nothing() -> None:
    """Ready --> StepLimit guarded by the time budget does not check turns: refused."""
    edge = LIMIT_EDGES[0]
    edges = tuple(attrs.evolve(e, guard="time_spent") if e == edge else e for e in RUN_MACHINE.edges)
    assert not check_machine(attrs.evolve(RUN_MACHINE, edges=edges)).ok


def test_a_left_guard_checks_its_edge_or_every_way_into_its_state() -> None:
    """A budget checked while some is left: on the spending edge itself, or on every edge into its state."""
    states = (StateSpec("A", "working"), StateSpec("B", "working"), END)
    on_edge = (Edge("A", "go", "B", guard="n_left", consumes="n"), Edge("A", "go", "End"), Edge("B", "go", "A"))
    budgets = {"n": "a counter"}
    good = MachineSpec("toy", "A", states, on_edge, budgets, left_guards={"n": "n_left"})
    assert check_machine(good).ok, str(check_machine(good))
    into = (Edge("A", "go", "B", guard="n_left"), Edge("A", "go", "End"), Edge("B", "go", "A", consumes="n"))
    assert check_machine(MachineSpec("toy", "A", states, into, budgets, left_guards={"n": "n_left"})).ok
    unchecked = (Edge("A", "go", "B", guard="other"), Edge("A", "go", "End"), Edge("B", "go", "A", consumes="n"))
    report = check_machine(MachineSpec("toy", "A", states, unchecked, budgets, left_guards={"n": "n_left"}))
    assert ("B",) in _rules(report)["checked_budget"] and "budgeted_cycles" in _rules(report), str(report)
    # Undeclared, the same budget is trusted as labelled, as before.
    assert check_machine(MachineSpec("toy", "A", states, unchecked, budgets)).ok
