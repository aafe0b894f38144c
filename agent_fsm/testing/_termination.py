"""
Termination, checked on the paths runs really take: a watchdog and a ranking-function check.

Rationale: :func:`agent_fsm.engine.check_machine` proves from the table that every
cycle passes an edge labelled ``consumes=<budget>``. It trusts the labels:
an edge that says it spends ``turns`` while its guard tests another counter,
or an effect that forgets to count, passes the proof and loops for ever.
Here the kit drives the machine itself, one transition at a time, and reads
the budget counters after each one:

* every counter stays within its limit and never goes down;
* each time a state comes round again (a cycle closes), a budget that the
  cycle's edges declare they consume has strictly grown: the counters are a
  ranking function along that path, and the labels tell the truth;
* a watchdog bounds the transitions (by default from the limits: with
  every cycle growing a bounded counter, no run can be longer), so even a
  machine breaking both rules fails, with the path walked so far, and never hangs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hypothesis import settings as Settings
from hypothesis import strategies as st

from agent_fsm.engine import CompiledMachine, Edge, MachineSpec
from agent_fsm.testing._coverage import Coverage
from agent_fsm.testing._invariants import InvariantViolation
from agent_fsm.testing._search import run_property, searched

__all__ = ["check_machine_terminates", "drive_machine", "transition_bound"]

Counters = Mapping[str, Callable[[Any], int]]


def transition_bound(spec: MachineSpec, limits: Mapping[str, int]) -> int:
    """
    The most transitions a run of ``spec`` can take if every cycle grows one of
    the budgets bounded by ``limits``: each state can come round at most once
    per unit of budget, plus once more.
    """
    return len(spec.states) * (sum(limits.values()) + 1)


def _edge_taken(spec: MachineSpec, source: str, event: str, dest: str) -> Edge | None:
    candidates = [e for e in spec.edges if (e.source, e.event, e.dest) == (source, event, dest)]
    labelled = [e for e in candidates if e.consumes is not None]
    chosen = labelled or candidates
    return chosen[0] if chosen else None


def _walked(path: list[str]) -> str:
    shown = path if len(path) <= 40 else [*path[:10], f"... {len(path) - 30} more ...", *path[-20:]]
    return " -> ".join(shown)


def drive_machine(
    machine: CompiledMachine,
    run: Any,
    *,
    counters: Counters,
    limits: Mapping[str, int],
    max_transitions: int | None = None,
    coverage: Coverage | None = None,
) -> list[str]:
    """
    Drive ``run`` through ``machine`` until it rests, checking termination at every transition.

    ``counters`` reads each declared budget's counter off the run (spent so
    far: it only grows); ``limits`` bounds the counters that have a limit.
    ``max_transitions`` defaults to :func:`transition_bound`. ``coverage``
    (of this machine) records the walk, edges and events, failing or not.

    Returns:
        The path: every state the run was in, in order.

    Raises:
        InvariantViolation: ``bounded_run`` (the watchdog), ``budget_bound``
            (a counter passed its limit or went down) or ``budgeted_cycle`` (a
            cycle grew no budget its edges consume); each names the path so far.
    """
    spec = machine.spec
    unknown = sorted(set(counters) - set(spec.budgets)) + sorted(set(limits) - set(counters))
    if unknown:
        raise TypeError(
            f"counters must name budgets of machine {spec.name!r} ({sorted(spec.budgets)}) and limits must name "
            f"counters ({sorted(counters)}); got unknown {unknown}"
        )
    bound = max_transitions if max_transitions is not None else transition_bound(spec, limits)
    path = [run.machine_state]
    events: list[str] = []
    try:
        return _walk(machine, run, counters, limits, bound, path, events)
    finally:
        if coverage is not None:
            coverage.runs += 1
            coverage.record_path(path, events)


def _walk(
    machine: CompiledMachine,
    run: Any,
    counters: Counters,
    limits: Mapping[str, int],
    bound: int,
    path: list[str],
    events: list[str],
) -> list[str]:
    spec = machine.spec
    readings = [{name: read(run) for name, read in counters.items()}]
    edges: list[Edge | None] = []
    last_seen = {run.machine_state: 0}
    while (event := spec.auto_event(run.machine_state)) is not None:
        if len(edges) >= bound:
            raise InvariantViolation(
                "bounded_run",
                f"machine {spec.name!r} took {bound} transitions without resting (the bound for limits {dict(limits)});"
                f" the path so far: {_walked(path)}",
            )
        source = run.machine_state
        machine.fire(run, event)
        events.append(event)
        path.append(run.machine_state)
        edges.append(_edge_taken(spec, source, event, run.machine_state))
        now = {name: read(run) for name, read in counters.items()}
        for name, value in now.items():
            if value < readings[-1][name]:
                raise InvariantViolation(
                    "budget_bound",
                    f"budget {name!r} went down from {readings[-1][name]} to {value} on {source} --{event}--> "
                    f"{run.machine_state}; the path so far: {_walked(path)}",
                )
            if name in limits and value > limits[name]:
                raise InvariantViolation(
                    "budget_bound",
                    f"budget {name!r} reached {value}, past its limit {limits[name]}, on {source} --{event}--> "
                    f"{run.machine_state}; the path so far: {_walked(path)}",
                )
        readings.append(now)
        here = len(path) - 1
        if run.machine_state in last_seen:
            _check_cycle(spec, path, edges, readings, last_seen[run.machine_state], here)
        last_seen[run.machine_state] = here
    return path


def _check_cycle(
    spec: MachineSpec,
    path: list[str],
    edges: list[Edge | None],
    readings: list[dict[str, int]],
    start: int,
    end: int,
) -> None:
    """The cycle ``path[start..end]`` must grow a budget one of its edges says it consumes."""
    taken = edges[start:end]
    declared = sorted({e.consumes for e in taken if e is not None and e.consumes is not None})
    grown = sorted(name for name in readings[end] if readings[end][name] > readings[start][name])
    if set(declared) & set(grown):
        return
    cycle = " -> ".join(path[start : end + 1])
    if not declared:
        why = "none of its edges declares a budget (the static checker refuses such a machine)"
    else:
        values = ", ".join(f"{n} {readings[start].get(n, '?')} -> {readings[end].get(n, '?')}" for n in declared)
        why = f"its edges declare they consume {declared} but none grew ({values})"
        if grown:
            why += f"; {grown} grew instead, so a label or a guard names the wrong counter"
    raise InvariantViolation(
        "budgeted_cycle",
        f"machine {spec.name!r}: the cycle {cycle} went round and {why}; the path so far: {_walked(path)}",
    )


def check_machine_terminates(
    machine: CompiledMachine,
    runs: st.SearchStrategy[Any],
    *,
    counters: Counters,
    limits: Mapping[str, int] | Callable[[Any], Mapping[str, int]],
    max_transitions: int | None = None,
    settings: Settings | None = None,
    report: bool = False,
) -> Coverage:
    """
    Check, for runs drawn from ``runs``, that ``machine`` terminates along every path it takes.

    Each run is driven by :func:`drive_machine`; ``limits`` is a mapping or a
    function of the run (a run's own limits object, say).

    Returns:
        The :class:`Coverage` of ``machine``'s edges by the runs walked (printed when ``report`` is true).

    Raises:
        InvariantViolation: ``bounded_run``, ``budget_bound`` or ``budgeted_cycle``, for the shrunk run;
            its notes hold the coverage.
    """
    coverage = Coverage(machine=machine.spec)

    def property_(data: st.DataObject) -> None:
        run = data.draw(runs, label="run")
        chosen = limits(run) if callable(limits) else limits
        drive_machine(
            machine, run, counters=counters, limits=chosen, max_transitions=max_transitions, coverage=coverage
        )

    return searched(coverage, report, lambda: run_property(property_, settings))
