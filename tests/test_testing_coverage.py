"""Coverage you can see, and shortest paths: what the checks exercised, and runs that reach every state."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st

from agent_fsm import (
    RUN_MACHINE,
    Agent,
    Limits,
    MachineSpec,
    Price,
    Prices,
    ScriptedModel,
    answer_message,
    compile_machine,
    run,
    tool_call_message,
)
from agent_fsm.engine import Edge, StateSpec
from agent_fsm.examples.support_desk import make_support_desk, refund_gate
from agent_fsm.testing import (
    PROVIDER_DOWN,
    Coverage,
    InvariantViolation,
    check_gate_contains,
    check_machine_terminates,
    check_reaches_all,
    drive_machine,
    paths_to,
    routes,
)
from agent_fsm.testing._coverage import collected_reports
from tests.worlds import expenses

pytest_plugins = ("pytester",)

FIXED = settings(derandomize=True, database=None, max_examples=40, phases=[p for p in Phase if p is not Phase.explain])


def test_coverage_counts_edges_states_tools_and_boundaries() -> None:
    """A single run's path, its valid proposals and the boundary values they took are counted; the rest is named."""
    desk = make_support_desk()
    coverage = Coverage.of_tools(desk.tools, (2500, 2501))
    refund = tool_call_message("c", "refund_order", {"order_id": "A-17", "amount_cents": 2501})
    model = ScriptedModel([refund, answer_message("Refunded.")])
    coverage.record_run(run("t", model, desk.tools, gate=coverage.counting(refund_gate)), desk.tools)
    assert coverage.runs == 1
    assert ("Ready", "next_turn", "Proposing") in coverage.edges
    assert ("Proposing", "judge", "Executing") in coverage.edges
    assert coverage.verdicts["allow"] == 1 and coverage.proposed["refund_order"] == 1
    assert coverage.reached["refund_order.amount_cents"] == {2501}
    report = coverage.report()
    assert "never taken: Ready --next_turn [turn_budget_spent]--> StepLimit" in report
    assert "never proposed: lookup_order" in report or "lookup_order 0/0" in report
    assert "refund_order.amount_cents: never" in report and "2500" in report


def test_a_failure_carries_the_coverage_and_report_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    """A caught bug's notes hold the coverage report; report=True prints it for a passing check too."""
    with pytest.raises(InvariantViolation) as caught:
        check_gate_contains(expenses.buggy_gate, expenses.make_world, expenses.forbidden, settings=FIXED)
    assert any(note.startswith("coverage of") for note in caught.value.__notes__)
    coverage = check_gate_contains(
        expenses.sound_gate, expenses.make_world, expenses.forbidden, settings=FIXED, report=True
    )
    printed = capsys.readouterr().out
    assert printed.startswith("coverage of") and "gate verdicts" in printed
    assert coverage.verdicts["ask"] > 0 and coverage.verdicts["allow"] > 0
    assert "file_expense.amount_cents" in coverage.boundaries
    assert 40_001 in coverage.boundaries["file_expense.amount_cents"]


def test_paths_to_gives_the_shortest_route_through_the_table() -> None:
    """The route to each state is a chain of edges from the initial state, no longer than any other."""
    route = paths_to(RUN_MACHINE, "Handoff")
    assert [e.dest for e in route] == ["Proposing", "Executing", "Handoff"]
    assert paths_to(RUN_MACHINE, "Ready") == ()
    # the first shortest route in table order: an allowed call, its result repeated (Limits.repeated_results)
    assert [e.dest for e in paths_to(RUN_MACHINE, "NoProgress")] == ["Proposing", "Executing", "NoProgress"]
    with pytest.raises(ValueError, match="not a state"):
        paths_to(RUN_MACHINE, "Nowhere")
    island = MachineSpec(
        name="island",
        initial="A",
        states=(StateSpec("A", "absorbing", "start", stop="a"), StateSpec("B", "absorbing", "cut off", stop="b")),
        edges=(),
    )
    with pytest.raises(ValueError, match="no route"):
        paths_to(island, "B")


def test_every_edge_of_the_run_machine_is_reached_on_the_support_desk() -> None:
    """check_reaches_all at its defaults enters every state and takes every edge of the run machine."""
    coverage = check_reaches_all(make_support_desk)
    assert coverage.missing_edges == [] and coverage.missing_states == []
    assert coverage.edge_ratio == 1.0


def test_routes_are_shortest_and_replay() -> None:
    """Each route replays to its state; the one to Answered is one reply, the one to ProviderError the failure."""
    found = routes(make_support_desk)
    assert set(found) == {s.name for s in RUN_MACHINE.states} - {"TakingAnswer"}  # no tool a person answers
    assert len(found["Answered"].replies) == 1 and found["Answered"].replies[0] == answer_message("Done.")
    assert found["ProviderError"].replies == (PROVIDER_DOWN,)
    for state, route in found.items():
        result = route.run(make_support_desk)
        assert state in ("Ready", *result.state.path), (state, route.setup, result.state.path)
        assert len(route.replies) <= len(found["Executing"].replies) + 1


def test_a_state_the_world_cannot_reach_is_named() -> None:
    """
    The desk's reads under the shipped refund gate: nothing asks a human and no effect can be left
    unknown, so AwaitingApproval is named, with its route through the table.
    """

    def reads_only() -> dict[str, Any]:
        return {name: spec for name, spec in make_support_desk().tools.items() if not spec.effectful}

    with pytest.raises(InvariantViolation) as caught:
        check_reaches_all(reads_only, gate=refund_gate)
    failure = caught.value
    assert failure.invariant == "reachable_state"
    assert "AwaitingApproval" in failure.detail and "approval_needed" in failure.detail
    assert "NoProgress" not in failure.detail.split("\n")[0]


def test_the_plugin_prints_each_checks_coverage(pytester: pytest.Pytester) -> None:
    """With -p agent_fsm.testing.plugin --agent-fsm-coverage, the summary lists each check's report by test."""
    pytester.makepyfile(
        test_desk="""
        from agent_fsm.examples.support_desk import make_support_desk
        from agent_fsm.testing import check_reaches_all

        def test_reaches():
            check_reaches_all(make_support_desk)
        """
    )
    shown = pytester.runpytest("-p", "agent_fsm.testing.plugin", "--agent-fsm-coverage", "-q")
    shown.assert_outcomes(passed=1)
    edges = len(RUN_MACHINE.without(("answer_needed", "answer_given")).edges)  # the desk has no person to answer
    shown.stdout.fnmatch_lines(
        ["*agent_fsm coverage*", "*test_desk.py::test_reaches*", f"*edges taken: {edges} of {edges}*"]
    )
    quiet = pytester.runpytest("-p", "agent_fsm.testing.plugin", "-q")
    assert "agent_fsm coverage" not in quiet.stdout.str()
    assert collected_reports() == []  # the plugin switched collecting off again


@attrs.define
class _Retry:
    limit: int
    attempts: int = 0
    machine_state: str = "Trying"


RETRY = MachineSpec(
    name="retry",
    initial="Trying",
    budgets={"attempts": "tries, at most the run's limit"},
    states=(
        StateSpec("Trying", "working", "One attempt is made.", on_enter=("count_attempt",)),
        StateSpec("Done", "absorbing", "No attempts left.", stop="done"),
    ),
    edges=(
        Edge("Trying", "retry", "Trying", guard="attempts_left", consumes="attempts"),
        Edge("Trying", "retry", "Done"),
    ),
)
RETRY_CALLBACKS = {
    "attempts_left": lambda run: run.attempts < run.limit,
    "count_attempt": lambda run: setattr(run, "attempts", run.attempts + 1),
}


def test_user_machine_coverage_from_drive_machine_and_check_machine_terminates() -> None:
    """Walks through a user's machine are counted against its own edges: one walk misses the retry, many take both."""
    machine = compile_machine(RETRY, RETRY_CALLBACKS)
    once = Coverage(machine=RETRY)
    drive_machine(machine, _Retry(limit=0), counters={"attempts": lambda r: r.attempts}, limits={}, coverage=once)
    assert [(e.source, e.dest) for e in once.missing_edges] == [("Trying", "Trying")]
    runs = st.builds(_Retry, st.integers(0, 3))
    coverage = check_machine_terminates(
        machine,
        runs,
        counters={"attempts": lambda r: r.attempts},
        limits=lambda r: {"attempts": r.limit + 1},
        settings=FIXED,
    )
    assert coverage.machine is RETRY and coverage.edge_ratio == 1.0 and coverage.runs >= 1
    assert "edges taken: 2 of 2" in coverage.report()


def test_a_plain_worlds_coverage_counts_against_its_agents_machine() -> None:
    """
    A check of a plain world counts edges against the plain agent's machine: an edge only an option brings
    (compaction, a money budget, screens) is never "never taken", but listed as not in this agent.
    """
    coverage = check_gate_contains(expenses.sound_gate, expenses.make_world, expenses.forbidden, settings=FIXED)
    machine = coverage.machine
    assert coverage.whole == RUN_MACHINE and machine != RUN_MACHINE
    assert {"Compacting", "CostLimit", "ScreeningInput"}.isdisjoint({s.name for s in machine.states})
    report = coverage.report()
    assert f"edges taken: {len(machine.edges) - len(coverage.missing_edges)} of {len(machine.edges)}" in report
    assert "compaction_due" not in "".join(line for line in report.splitlines() if "never taken" in line)
    assert "not in this agent" in report and "compaction_due" in report
    assert "states not in this agent:" in report and "Compacting" in report
    assert all(e in machine.edges for e in coverage.missing_edges)


def test_coverage_of_several_configurations_counts_against_their_union() -> None:
    """Runs of two configurations count against the union of their machines, in the table's order."""
    desk = make_support_desk()
    coverage = Coverage.of_tools(desk.tools)
    plain = Agent(ScriptedModel([answer_message("hi")]), desk.tools)
    costly = plain.replace(
        limits=Limits(max_cost=Decimal(1), max_output_tokens=10), prices=Prices(default=Price(Decimal(1), Decimal(1)))
    )
    coverage.record_run(plain.run("t"), desk.tools, plain)
    assert "CostLimit" not in {s.name for s in coverage.machine.states}
    coverage.record_run(costly.run("t"), desk.tools, costly)
    assert set(coverage.machine.edges) == set(plain.machine().edges) | set(costly.machine().edges)
    assert "CostLimit" in {s.name for s in coverage.machine.states}
    assert [e for e in RUN_MACHINE.edges if e in coverage.machine.edges] == list(coverage.machine.edges)
