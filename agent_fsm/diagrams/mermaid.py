"""
A machine as a Mermaid ``stateDiagram-v2`` (renders on GitHub), with a run's path highlighted.
"""

from __future__ import annotations

import collections
import json
import re

from agent_fsm.diagrams.catalog import ships
from agent_fsm.diagrams.labels import (
    REGENERATE_COMMAND,
    check_path,
    edge_label,
    paused_note,
    taken_label,
    title_of,
)
from agent_fsm.diagrams.path import RunPath
from agent_fsm.engine import MachineSpec

__all__ = ["mermaid_text", "to_mermaid"]


# Mermaid reads ';' as a statement break and '#...;' as an entity, and renders
# '<...>' as HTML: write those as numeric entities so text shows as written.
_MERMAID_ESCAPES = {"#": "#35;", ";": "#59;", "<": "#60;", ">": "#62;"}
_MERMAID_ESCAPE = re.compile("|".join(re.escape(c) for c in _MERMAID_ESCAPES))
_MERMAID_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# Words the state-diagram grammar reserves, and the ids it gives [*] itself.
_MERMAID_RESERVED = {
    "state",
    "note",
    "end",
    "class",
    "classDef",
    "style",
    "direction",
    "click",
    "as",
    "hide",
    "scale",
    "accTitle",
    "accDescr",
    "left",
    "right",
    "of",
    "over",
    "root_start",
    "root_end",
}
_MERMAID_CLASSES = {
    "absorbing": "fill:#e9ecef,stroke:#343a40,stroke-width:3px",
    "paused": "fill:#fff3bf,stroke:#f08c00,stroke-width:2px,stroke-dasharray:5 5",
    "visited": "fill:#d3f9d8,stroke:#2b8a3e,stroke-width:3px",
    "ended": "fill:#2b8a3e,color:#ffffff,stroke:#1b5e20,stroke-width:4px",
}


def mermaid_text(text: str, limit: int | None = None) -> str:
    text = " ".join(text.split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    text = _MERMAID_ESCAPE.sub(lambda m: _MERMAID_ESCAPES[m.group()], text)
    return "#58;" + text[1:] if text.startswith(":") else text  # Mermaid drops a label's leading colon


def _mermaid_ids(machine: MachineSpec) -> dict[str, str]:
    """A Mermaid id per state: its name when the grammar allows it, else a fresh alias."""
    ids: dict[str, str] = {}
    taken = {s.name for s in machine.states}
    counter = 0
    for state in machine.states:
        if _MERMAID_ID.fullmatch(state.name) and state.name not in _MERMAID_RESERVED:
            ids[state.name] = state.name
            continue
        while f"S{counter}" in taken:
            counter += 1
        ids[state.name] = f"S{counter}"
        taken.add(ids[state.name])
    return ids


def to_mermaid(
    machine: MachineSpec, *, path: RunPath | None = None, direction: str | None = None, title: str | None = None
) -> str:
    """
    ``machine`` as a Mermaid ``stateDiagram-v2``.

    Every state and edge appears; edges read ``event [guard]`` (``[else]``
    for an unguarded fallback, ``/ spends <budget>`` where a budget is spent);
    absorbing states lead to ``[*]``; paused states are styled apart and
    carry a note naming the events that resume them. With ``path``, visited
    states are highlighted, the state the run rests in most, and each edge
    taken says how often. ``direction`` (``LR``, ``TB``, ...) sets the layout;
    by default Mermaid's own. Only agent_fsm's own machines carry the
    comment saying how to regenerate them. ``title`` replaces the machine's name at the top.
    """
    check_path(machine, path)
    ids = _mermaid_ids(machine)
    counts = path.counts() if path is not None else collections.Counter()
    lines = [
        "---",
        # The title is YAML front matter: a JSON string is a YAML string, so any name is safe.
        f"title: {json.dumps(' '.join(title_of(machine, path, title).split()), ensure_ascii=False)}",
        "---",
        "stateDiagram-v2",
    ]
    if direction is not None:
        if direction not in ("LR", "TB", "RL", "BT"):
            raise ValueError(f"direction must be one of LR, TB, RL, BT, got {direction!r}")
        lines.append(f"    direction {direction}")
    if ships(machine):
        lines.append(
            f"    %% Generated from the {machine.name!r} machine declaration; regenerate with: {REGENERATE_COMMAND}"
        )
    else:
        lines.append(f"    %% Generated from the {machine.name!r} machine declaration")
    mentioned = {e.source for e in machine.edges} | {e.dest for e in machine.edges} | {machine.initial}
    for state in machine.states:
        if ids[state.name] != state.name:
            quoted = mermaid_text(state.name).replace('"', "#34;").replace(":", "#58;")
            lines.append(f'    state "{quoted}" as {ids[state.name]}')
        elif state.name not in mentioned and state.kind != "absorbing":
            lines.append(f"    {state.name}")
    lines.append(f"    [*] --> {ids[machine.initial]}")
    for edge in machine.edges:
        label = edge_label(machine, edge)
        if counts[edge]:
            label += f" ({taken_label(counts[edge])})"
        lines.append(f"    {ids[edge.source]} --> {ids[edge.dest]}: {mermaid_text(label)}")
    for state in machine.states:
        if state.kind == "absorbing":
            lines.append(f"    {ids[state.name]} --> [*]")
    for state in machine.states:
        if state.kind == "paused":
            lines += [
                f"    note right of {ids[state.name]}",
                f"        {mermaid_text(paused_note(machine, state))}",
                "    end note",
            ]
    members: dict[str, list[str]] = {name: [] for name in _MERMAID_CLASSES}
    for state in machine.states:
        if state.kind in members:
            members[state.kind].append(ids[state.name])
    if path is not None:
        members["visited"] = [ids[s.name] for s in machine.states if s.name in path.visited and s.name != path.end]
        members["ended"] = [ids[path.end]]
    for name, style in _MERMAID_CLASSES.items():
        if members[name]:
            lines.append(f"    classDef {name} {style}")
    for name in _MERMAID_CLASSES:
        if members[name]:
            lines.append(f"    class {','.join(members[name])} {name}")
    return "\n".join(lines) + "\n"
