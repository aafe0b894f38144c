"""
Static checks on a machine declaration: termination is proved from the table, not hoped for.

The four properties, for any :class:`~agent_fsm.machine.MachineSpec`:

* every state is reachable from the initial state;
* every state that is not absorbing can reach an absorbing state;
* no edge leaves an absorbing state;
* every cycle passes through an edge that consumes a declared budget.
  Budgets only shrink, so such a cycle can be taken finitely often: together
  with the first three, every run ends.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from .machine import Edge, MachineSpec

__all__ = ["MachineReport", "Violation", "check_machine"]


@attrs.frozen
class Violation:
    """One broken property: its ``rule``, the ``states`` involved, and a readable message."""

    rule: str
    states: tuple[str, ...]
    message: str


@attrs.frozen
class MachineReport:
    """Every violation found in one machine (none means the machine is proved to terminate)."""

    machine: str
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    def __str__(self) -> str:
        if self.ok:
            return f"machine {self.machine!r}: all checks hold"
        return f"machine {self.machine!r}:\n" + "\n".join(f"  [{v.rule}] {v.message}" for v in self.violations)


def _closure(start: Iterable[str], step: dict[str, set[str]]) -> set[str]:
    seen = set(start)
    frontier = list(seen)
    while frontier:
        for nxt in step.get(frontier.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return seen


def _unbudgeted_cycles(names: list[str], edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components (Tarjan) of the graph of edges that consume nothing."""
    graph: dict[str, list[str]] = {n: [] for n in names}
    self_loops = set()
    for e in edges:
        if e.consumes is None:
            graph[e.source].append(e.dest)
            if e.source == e.dest:
                self_loops.add(e.source)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in self_loops:
                found.append(sorted(component, key=names.index))

    for name in names:
        if name not in index:
            visit(name)
    return found


def check_machine(spec: MachineSpec) -> MachineReport:
    """Check the four termination properties of ``spec`` and report every violation."""
    names = [s.name for s in spec.states]
    absorbing = {s.name for s in spec.states if s.kind == "absorbing"}
    forward: dict[str, set[str]] = {}
    backward: dict[str, set[str]] = {}
    for e in spec.edges:
        forward.setdefault(e.source, set()).add(e.dest)
        backward.setdefault(e.dest, set()).add(e.source)
    violations: list[Violation] = []

    reachable = _closure([spec.initial], forward)
    for name in names:
        if name not in reachable:
            violations.append(Violation("reachable", (name,), f"state {name!r} cannot be reached from {spec.initial!r}"))

    if not absorbing:
        violations.append(Violation("can_end", (), "the machine declares no absorbing state"))
    can_end = _closure(absorbing, backward)
    for name in names:
        if name not in can_end:
            violations.append(
                Violation("can_end", (name,), f"no path leads from {name!r} to an absorbing state")
            )

    for e in spec.edges:
        if e.source in absorbing:
            violations.append(
                Violation("absorbing", (e.source,), f"absorbing state {e.source!r} has an edge to {e.dest!r}")
            )

    for cycle in _unbudgeted_cycles(names, list(spec.edges)):
        violations.append(
            Violation(
                "budgeted_cycles",
                tuple(cycle),
                "cycle through " + " -> ".join(cycle) + " consumes no declared budget, so nothing bounds it",
            )
        )
    return MachineReport(spec.name, tuple(violations))
