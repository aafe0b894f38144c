"""
Coverage you can see: which edges, verdicts, tools and argument boundaries a check exercised.

Rationale: a check that passes says nothing about what it tried. A search
that never reached ``AwaitingApproval``, never heard the gate say ``ask``, or
never proposed the amount one above the limit passed without testing the
part that matters. :class:`Coverage` counts what the runs really did (read
from their records, not from what the strategies meant to draw) and its
:meth:`~Coverage.report` names what was never reached. The checks return
one, add its report to a failure, print it with ``report=True``, and hand it
to the pytest plugin (``--agent-fsm-coverage``, see ``agent_fsm.testing.plugin``).
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from agent_fsm import RUN_MACHINE, Agent, Edge, MachineSpec, RunResult, ToolCall, as_verdict, parse_tool_calls
from agent_fsm.engine import Gate, Registry
from agent_fsm.testing._sums import integer_bounds, summed_fields

__all__ = ["Coverage", "collected_reports", "collect_reports"]

EdgeKey = tuple[str, str, str]
"""An edge as ``(source, event, dest)``."""

_MAX_BOUNDARIES = 12
"""Boundary values listed per argument: the bounds and the constants nearest them."""

_REPORTS: list[tuple[str, str]] = []
_COLLECTING = False


def collect_reports(on: bool = True) -> None:
    """
    Keep every check's coverage report for the pytest plugin's summary
    (``--agent-fsm-coverage``), from a clean slate; ``on=False`` stops and forgets them.
    """
    global _COLLECTING
    _COLLECTING = on
    _REPORTS.clear()


def collected_reports() -> list[tuple[str, str]]:
    """The ``(test, report)`` pairs kept since :func:`collect_reports` was switched on."""
    return list(_REPORTS)


def _key(edge: Edge) -> EdgeKey:
    return (edge.source, edge.event, edge.dest)


def _boundaries(tools: Registry, constants: Sequence[Any]) -> dict[str, list[int]]:
    """For each numeric argument (and each summed part of a list of items), the values at its boundaries."""
    ints = sorted({c for c in constants if type(c) is int})
    found: dict[str, list[int]] = {}

    def values_for(schema: Mapping[str, Any]) -> list[int]:
        low, high = integer_bounds(schema)
        inside = [c for c in ints if (low is None or c >= low) and (high is None or c <= high)]
        edges = [b for b in (low, high) if b is not None]
        return sorted({*edges, *inside})[:_MAX_BOUNDARIES]

    for name, tool in tools.items():
        for field, sub in tool.json_schema.get("properties", {}).items():
            if not isinstance(sub, Mapping) or "enum" in sub:
                continue
            if sub.get("type") in ("integer", "number"):
                found[f"{name}.{field}"] = values_for(sub)
            elif sub.get("type") == "array" and isinstance(sub.get("items"), Mapping):
                for part in summed_fields(sub["items"]):
                    label = f"sum({name}.{field}[*]{'' if part is None else '.' + part})"
                    found[label] = [c for c in ints if c > 0][:_MAX_BOUNDARIES]
    return {k: v for k, v in found.items() if v}


def _measured(call: ToolCall) -> dict[str, Any]:
    """The numeric values a call's arguments take, by the labels :func:`_boundaries` uses."""
    found: dict[str, Any] = {}
    for field, value in (call.arguments or {}).items():
        if type(value) in (int, float):
            found[f"{call.name}.{field}"] = value
        elif isinstance(value, list):
            if all(type(v) is int for v in value):
                found[f"sum({call.name}.{field}[*])"] = sum(value)
            elif all(isinstance(v, Mapping) for v in value):
                for part in {k for v in value for k, x in v.items() if type(x) is int}:
                    found[f"sum({call.name}.{field}[*].{part})"] = sum(int(v.get(part, 0)) for v in value)
    return found


@attrs.define
class Coverage:
    """
    What the runs of one check exercised: edges of ``machine``, states, gate
    verdicts, tools proposed and executed, and argument values at boundaries.

    ``boundaries`` maps an argument (``tool.field``, or ``sum(tool.field[*].part)``
    for line items) to the values worth reaching: its bounds and the gate's
    constants within them; ``reached`` holds those a valid proposal took.
    """

    machine: MachineSpec = RUN_MACHINE
    boundaries: dict[str, list[int]] = attrs.field(factory=dict)
    # The whole table when ``machine`` is an agent's part of it (see count_against): the rest is not in this agent.
    whole: MachineSpec | None = None
    runs: int = 0
    edges: Counter[EdgeKey] = attrs.field(factory=Counter)
    states: Counter[str] = attrs.field(factory=Counter)
    verdicts: Counter[str] = attrs.field(factory=Counter)
    proposed: Counter[str] = attrs.field(factory=Counter)
    executed: Counter[str] = attrs.field(factory=Counter)
    reached: dict[str, set[int]] = attrs.field(factory=dict)
    tools: tuple[str, ...] = ()
    # Boundary values still unreached after the targeted phase, with the reason (see agent_fsm.testing._targeting).
    unreachable: dict[str, dict[int, str]] = attrs.field(factory=dict)

    @classmethod
    def of_tools(cls, tools: Registry, constants: Sequence[Any] = ()) -> Coverage:
        """Coverage of the run machine for runs over ``tools``, with boundaries from the contracts and ``constants``."""
        return cls(boundaries=_boundaries(tools, constants), tools=tuple(tools))

    # --- recording -----------------------------------------------------------

    def count_against(self, machine: MachineSpec) -> None:
        """
        Count against ``machine``, the run machine as an agent's configuration can take it
        (:meth:`agent_fsm.Agent.machine`); runs of several configurations count against the union of theirs.

        An edge the configuration cannot take is not missing: the report lists it as not in this agent.
        """
        whole = self.whole if self.whole is not None else self.machine
        if self.whole is not None:  # a second configuration: the union, in the table's order
            edges, states = set(self.machine.edges) | set(machine.edges), set(self.machine.states) | set(machine.states)
            machine = attrs.evolve(
                whole,
                states=tuple(s for s in whole.states if s in states),
                edges=tuple(e for e in whole.edges if e in edges),
            )
        self.whole, self.machine = whole, machine

    def record_path(self, path: Sequence[str], events: Sequence[str] | None = None) -> None:
        """
        A walk through ``machine``: the states in order (the initial one may be
        left out, as a run's ``state.path`` leaves it); ``events`` name the edge
        taken between each pair when one pair has several.
        """
        states = list(path)
        if states and states[0] != self.machine.initial and events is None:
            states.insert(0, self.machine.initial)
        self.states.update(states)
        for index, (source, dest) in enumerate(itertools.pairwise(states)):
            event = events[index] if events is not None and index < len(events) else None
            for edge in self.machine.edges:
                if (edge.source, edge.dest) == (source, dest) and (event is None or edge.event == event):
                    self.edges[_key(edge)] += 1
                    break

    def record_run(self, result: RunResult, tools: Registry, agent: Agent | None = None) -> None:
        """
        One run: its path, the tools it proposed (valid calls) and executed, the argument values it tried;
        given the ``agent`` that ran it, counted against that agent's machine (see :meth:`count_against`).
        """
        if agent is not None:
            self.count_against(agent.machine(limits=result.state.limits))
        self.runs += 1
        self.record_path(result.state.path)
        answered = {o.call_id for o in result.state.observations if o.kind in ("result", "error")}
        for message in result.state.messages:
            if message.get("role") != "assistant":
                continue
            for call in parse_tool_calls(message):
                tool = tools.get(call.name)
                if tool is None or call.arguments is None or tool.errors(call.arguments):
                    continue
                self.proposed[call.name] += 1
                if call.call_id in answered:
                    self.executed[call.name] += 1
                for label, value in _measured(call).items():
                    if value in self.boundaries.get(label, ()):
                        self.reached.setdefault(label, set()).add(value)

    def counting(self, gate: Gate) -> Gate:
        """``gate``, counting the kind of every verdict it gives."""

        def counted(call: ToolCall) -> Any:
            answer = gate(call)
            self.verdicts[as_verdict(answer).kind] += 1
            return answer

        return counted

    # --- reading -------------------------------------------------------------

    @property
    def missing_edges(self) -> list[Edge]:
        """The machine's edges no run took, in table order."""
        return [e for e in self.machine.edges if _key(e) not in self.edges]

    @property
    def missing_states(self) -> list[str]:
        return [s.name for s in self.machine.states if s.name not in self.states]

    @property
    def edge_ratio(self) -> float:
        """The share of the machine's edges taken (1.0: every one)."""
        return 1 - len(self.missing_edges) / len(self.machine.edges) if self.machine.edges else 1.0

    @property
    def missing_boundaries(self) -> dict[str, list[int]]:
        return {
            label: [v for v in values if v not in self.reached.get(label, set())]
            for label, values in self.boundaries.items()
            if any(v not in self.reached.get(label, set()) for v in values)
        }

    def report(self) -> str:
        """What was exercised and, line by line, what never was."""
        machine, whole = self.machine, self.whole
        taken = len(machine.edges) - len(self.missing_edges)
        if whole is None:
            lines = [f"coverage of {self.runs} run(s) of machine {machine.name!r}:"]
        else:
            lines = [
                f"coverage of {self.runs} run(s) of machine {machine.name!r} as the agent is configured"
                f" ({len(machine.edges)} of its {len(whole.edges)} edges):"
            ]
        lines.append(f"  edges taken: {taken} of {len(machine.edges)} ({100 * self.edge_ratio:.0f}%)")
        for edge in self.missing_edges:
            guard = f" [{edge.guard}]" if edge.guard else ""
            lines.append(f"    never taken: {edge.source} --{edge.event}{guard}--> {edge.dest}")
        entered = len(machine.states) - len(self.missing_states)
        lines.append(f"  states entered: {entered} of {len(machine.states)}")
        if self.missing_states:
            lines.append(f"    never entered: {', '.join(self.missing_states)}")
        if whole is not None and whole != machine:
            kept = {s.name for s in machine.states}
            doors = sorted({str(e.guard) for e in whole.edges if e not in machine.edges and e.source in kept})
            absent = [s.name for s in whole.states if s.name not in kept]
            count = len(whole.edges) - len(machine.edges)
            lines.append(
                f"  not in this agent: {count} edges, behind guards its options never make true: {', '.join(doors)}"
            )
            if absent:
                lines.append(f"    states not in this agent: {', '.join(absent)}")
        if self.verdicts or self.tools:
            kinds = ", ".join(f"{k} {self.verdicts[k]}" for k in ("allow", "deny", "ask"))
            never = [k for k in ("allow", "deny", "ask") if not self.verdicts[k]]
            lines.append(f"  gate verdicts: {kinds}" + (f" (never: {', '.join(never)})" if never else ""))
        if self.tools:
            lines.append("  tools proposed (valid) / executed: " + _counts(self.tools, self.proposed, self.executed))
            idle = [t for t in self.tools if not self.proposed[t]]
            if idle:
                lines.append(f"    never proposed: {', '.join(idle)}")
        if self.boundaries:
            total = sum(len(v) for v in self.boundaries.values())
            hit = sum(len(self.reached.get(k, ())) for k in self.boundaries)
            lines.append(f"  argument boundaries reached: {hit} of {total}")
            for label, values in self.missing_boundaries.items():
                lines.append(f"    {label}: never {', '.join(map(str, values))}")
                for value, why in self.unreachable.get(label, {}).items():
                    lines.append(f"      {value}: {why}")
        return "\n".join(lines)

    def publish(self, report: bool) -> None:
        """Print the report if asked, and keep it for the pytest plugin's summary if it collects them."""
        if report:
            print(self.report())
        if _COLLECTING:
            test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0] or "(outside a test)"
            _REPORTS.append((test, self.report()))


def _counts(names: Iterable[str], proposed: Counter[str], executed: Counter[str]) -> str:
    return ", ".join(f"{n} {proposed[n]}/{executed[n]}" for n in names)
