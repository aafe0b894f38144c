"""
Static checks on a machine declaration: termination is proved from the table, not hoped for.

The four properties, for any :class:`~agent_fsm.engine.MachineSpec`:

* every state is reachable from the initial state;
* every state that is not absorbing can reach an absorbing state;
* no edge leaves an absorbing state;
* every cycle passes through an edge that consumes a declared budget, and
  checks on that very edge that the budget is not spent (see
  :func:`unchecked_spending`). Budgets only shrink, so such a cycle can be
  taken finitely often: together with the first three, every run ends.

A budget's check is declared on the machine (``spent_guards``: the guards
of earlier edges of the spending edge's state that leave for a resting
state, the budget's own exhaustion first, then every limit bounding the same
work, so work is admitted only once each is checked; ``left_guards``: the
guard that holds only while some is left, on the spending edge or on every
edge into its state). The proof asks
that the cycle itself pass the check, not that some edge somewhere lead to
the limit: a limit reached from one state proves nothing for a cycle through
another. A budget whose check is not declared is trusted as labelled.

It also warns (without failing the report) about a working state whose edges
for its event are all guarded: unless those guards are exhaustive, some run
can find no edge to take and raises :class:`~agent_fsm.InvalidTransition`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from agent_fsm.engine._context import ToolRule
from agent_fsm.engine._machine import Edge, MachineSpec

__all__ = ["MachineReport", "Violation", "check_machine", "check_tool_rules", "cycles", "unchecked_spending"]


# --- analysis ---


@attrs.frozen
class Violation:
    """
    One broken property: its ``rule``, the ``states`` involved, a readable
    message, and the ``edges`` at fault (a cycle's edges, an edge leaving an absorbing state).
    """

    rule: str
    states: tuple[str, ...]
    message: str
    edges: tuple[Edge, ...] = ()


@attrs.frozen
class MachineReport:
    """
    Every violation found in one machine (none means the machine is proved to
    terminate), and warnings that do not break the proof.
    """

    machine: str
    violations: tuple[Violation, ...]
    warnings: tuple[Violation, ...] = ()

    @property
    def ok(self) -> bool:
        """No violation: every run of this machine ends."""
        return not self.violations

    def __str__(self) -> str:
        head = f"machine {self.machine!r}: " + (
            "all checks hold" if self.ok else f"{len(self.violations)} violation(s)"
        )
        lines = [head]
        lines += [f"  [{v.rule}] {v.message}" for v in self.violations]
        lines += [f"  warning [{w.rule}] {w.message}" for w in self.warnings]
        return "\n".join(lines)


def _edge_text(edge: Edge) -> str:
    guard = f" [{edge.guard}]" if edge.guard else ""
    return f"{edge.source} --{edge.event}{guard}--> {edge.dest}"


def _closure(start: Iterable[str], step: dict[str, set[str]]) -> set[str]:
    seen = set(start)
    frontier = list(seen)
    while frontier:
        for nxt in step.get(frontier.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return seen


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """
    The cycles of a directed graph: its strongly connected components (Tarjan) that hold a cycle.

    A component of several nodes, or one node with an edge to itself. Nodes
    are listed in the graph's order within each component, components in the
    order they are found. The architecture tests use it on the import graph.
    """
    names = list(graph)
    order = {name: i for i, name in enumerate(names)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
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
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component, key=order.__getitem__))

    for name in names:
        if name not in index:
            visit(name)
    return found


def _unbudgeted_cycles(names: list[str], edges: list[Edge]) -> list[list[str]]:
    """The cycles of the graph of edges that consume nothing."""
    graph: dict[str, list[str]] = {n: [] for n in names}
    for e in edges:
        if e.consumes is None:
            graph[e.source].append(e.dest)
    return cycles(graph)


def unchecked_spending(spec: MachineSpec) -> dict[Edge, tuple[str, bool]]:
    """
    The edges that spend a budget without checking, where they are taken, that some is left: each with
    why, and whether the budget's own check is the one missing (then the edge bounds no cycle).

    An edge spending ``b`` is checked when each of ``b``'s spent guards (its
    own exhaustion, then every limit bounding the same work) guards an
    earlier edge of its state and event that leads to a resting state (the
    run stops there first), or when ``b``'s left guard guards the edge itself
    or every edge into its state.
    """
    resting = {s.name for s in spec.states if s.kind != "working"}
    found: dict[Edge, tuple[str, bool]] = {}
    for index, edge in enumerate(spec.edges):
        budget = edge.consumes
        if budget is None:
            continue
        spent, left = spec.spent_guards.get(budget, ()), spec.left_guards.get(budget)
        if spent:
            earlier = spec.edges[:index]
            tried = {e.guard for e in earlier if (e.source, e.event) == (edge.source, edge.event) and e.dest in resting}
            missing = [guard for guard in spent if guard not in tried]
            if missing:
                found[edge] = (
                    f"{_edge_text(edge)} spends {budget!r}, but no earlier edge of {edge.source!r} on"
                    f" {edge.event!r} stops the run by {', '.join(f'[{g}]' for g in missing)} (an edge to a"
                    " resting state, tried before it): the work it admits is not checked against that limit",
                    spent[0] in missing,
                )
        elif left is not None:
            into = [e for e in spec.edges if e.dest == edge.source]
            if edge.guard == left or (into and all(e.guard == left for e in into)):
                continue
            found[edge] = (
                f"{_edge_text(edge)} spends {budget!r}, but neither it nor every edge into {edge.source!r}"
                f" is guarded by [{left}], which holds only while some is left",
                True,
            )
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
            violations.append(
                Violation("reachable", (name,), f"state {name!r} cannot be reached from {spec.initial!r}")
            )

    if not absorbing:
        violations.append(Violation("can_end", (), "the machine declares no absorbing state"))
    can_end = _closure(absorbing, backward)
    for name in names:
        if name not in can_end:
            violations.append(Violation("can_end", (name,), f"no path leads from {name!r} to an absorbing state"))

    for e in spec.edges:
        if e.source in absorbing:
            violations.append(
                Violation(
                    "absorbing",
                    (e.source,),
                    f"absorbing state {e.source!r} has an edge to {e.dest!r} ({_edge_text(e)})",
                    (e,),
                )
            )

    unchecked = unchecked_spending(spec)
    for edge, (why, _bounds_nothing) in unchecked.items():
        violations.append(Violation("checked_budget", (edge.source,), why, (edge,)))
    # An edge spending a budget whose own exhaustion it does not check bounds no cycle: the cycles are
    # those of the edges left once the checked ones are cut.
    counted = [attrs.evolve(e, consumes=None) if unchecked.get(e, ("", False))[1] else e for e in spec.edges]
    for cycle in _unbudgeted_cycles(names, counted):
        members = set(cycle)
        edges = tuple(
            e
            for e, c in zip(spec.edges, counted, strict=True)
            if c.consumes is None and e.source in members and e.dest in members
        )
        violations.append(
            Violation(
                "budgeted_cycles",
                tuple(cycle),
                "cycle through " + " -> ".join(cycle) + " consumes no declared budget that it checks, so nothing"
                " bounds it; its edges: "
                + "; ".join(_edge_text(e) for e in edges)
                + " (mark one with consumes=<budget>, checked where it is spent)",
                edges,
            )
        )
    return MachineReport(spec.name, tuple(violations), tuple(_unguarded_fallbacks(spec)))


def _unguarded_fallbacks(spec: MachineSpec) -> list[Violation]:
    """Working states whose every edge is guarded: a run there may find no edge to take."""
    found = []
    for state in spec.states:
        if state.kind != "working":
            continue
        edges = tuple(e for e in spec.edges if e.source == state.name)
        if edges and all(e.guard for e in edges):
            found.append(
                Violation(
                    "fallback",
                    (state.name,),
                    f"every edge of {state.name!r} on {edges[0].event!r} is guarded"
                    f" ({', '.join(str(e.guard) for e in edges)}); unless these guards are exhaustive a run there"
                    " raises InvalidTransition (add an unguarded last edge to make the fallback explicit)",
                    edges,
                )
            )
    return found


# --- tool rules ---


def check_tool_rules(rules: Iterable[ToolRule], tools: Iterable[str]) -> tuple[Violation, ...]:
    """
    Every tool the ``rules`` could never offer, and every rule naming a tool not in ``tools``.

    A tool is never offered when it must come after itself (a cycle of
    ``after`` rules), when it must come ``before`` a tool it needs a result
    of (directly or through its own prerequisites), or when a tool it needs
    is never offered. A tool that ``ends_run`` and is never offered is a run
    that could never end the way it was declared to: reported as
    ``never_ends``. The run machine still ends every run (by its budgets);
    this check refuses a rule set that contradicts itself.
    """
    rules = tuple(rules)
    known = set(tools)
    violations: list[Violation] = []
    needs: dict[str, set[str]] = {}
    for rule in rules:
        for name in (rule.tool, rule.other):
            if name is not None and name not in known:
                violations.append(
                    Violation("unknown_tool", (name,), f"rule {rule} names {name!r}, which is not a tool of the agent")
                )
        if rule.kind == "after" and rule.other is not None:
            needs.setdefault(rule.tool, set()).add(rule.other)
    required = {name: _closure(needs.get(name, ()), needs) for name in known | set(needs)}
    dead: dict[str, str] = {}
    for name, prior in required.items():
        if name in prior:
            dead[name] = f"{name!r} must come after itself (a cycle of after rules)"
    for rule in rules:
        if rule.kind == "before" and rule.other in required.get(rule.tool, ()) and rule.tool not in dead:
            dead[rule.tool] = f"{rule} but {rule.tool!r} needs a result of {rule.other!r} first"
    changed = True
    while changed:  # a tool that needs a tool never offered is never offered either
        changed = False
        for name, prior in needs.items():
            blocked = sorted(p for p in prior if p in dead)
            if name not in dead and blocked:
                dead[name] = f"{name!r} needs a result of {blocked[0]!r}, which is never offered"
                changed = True
    ending = {rule.tool for rule in rules if rule.kind == "ends_run"}
    for name, why in sorted(dead.items()):
        if name in ending:
            violations.append(Violation("never_ends", (name,), f"the run can never end by {name!r}: {why}"))
        else:
            violations.append(Violation("never_offered", (name,), f"{name!r} is never offered: {why}"))
    return tuple(violations)
