"""
What both renderers write on states and edges, so Mermaid and DOT never disagree.
"""

from __future__ import annotations

from agent_fsm.diagrams.path import RunPath
from agent_fsm.engine import Edge, MachineSpec, StateSpec

__all__ = ["REGENERATE_COMMAND", "agent_title", "check_path", "edge_label", "paused_note", "taken_label", "title_of"]


REGENERATE_COMMAND = "agent-fsm diagram --all --output diagrams/"
"""The one command that regenerates the committed ``diagrams/`` folder."""


def edge_label(machine: MachineSpec, edge: Edge) -> str:
    """``event [guard]``; an unguarded edge beside guarded siblings is the ``[else]`` fallback."""
    label = edge.event
    if edge.guard:
        label += f" [{edge.guard}]"
    elif sum(1 for e in machine.edges if (e.source, e.event) == (edge.source, edge.event)) > 1:
        label += " [else]"
    if edge.consumes:
        label += f" / spends {edge.consumes}"
    return label


def taken_label(count: int) -> str:
    return f"taken ×{count}"


def paused_note(machine: MachineSpec, state: StateSpec) -> str:
    events = sorted({e.event for e in machine.edges if e.source == state.name})
    return "paused: decided by " + " or ".join(events) if events else "paused"


def title_of(machine: MachineSpec, path: RunPath | None, title: str | None = None) -> str:
    head = title if title is not None else f"{machine.name} machine"
    return head if path is None else f"{head}: a run's path to {path.end}"


def agent_title(name: str | None, machine: MachineSpec, whole: MachineSpec) -> str:
    """What an agent's machine is called in a drawing: whose, and how much of the whole table it is."""
    who = name or "unnamed agent"
    if machine == whole:
        return f"{who}: the whole {whole.name} machine ({len(whole.states)} states, {len(whole.edges)} edges)"
    return (
        f"{who}: the {whole.name} machine as configured ({len(machine.states)} of {len(whole.states)} states,"
        f" {len(machine.edges)} of {len(whole.edges)} edges)"
    )


def check_path(machine: MachineSpec, path: RunPath | None) -> None:
    if path is not None and path.machine != machine:
        raise ValueError(f"the path is through machine {path.machine.name!r}, not {machine.name!r}")
