"""
An agent and the agents it nests, drawn as one statechart: Mermaid composite states and DOT clusters.

A nested agent runs a whole run machine inside its parent's ``Executing``
(the tool call that delegates to it), so its machine is drawn as a box
inside its parent's box, entered from ``Executing`` by that tool and left
by the child's ending: back to ``Executing`` (its answer, or its error, is
the call's observation), on to ``HandedOver`` for a handoff, or to
``AwaitingApproval`` when it pauses (the parent waits with it). Every
agent is drawn once: an agent met again (one that nests itself, directly
or through others, or one reached by two tools) gets an edge back to its
box, so recursion is drawn as a cycle, never unrolled. The title carries
what :func:`agent_fsm.check_composition` proved: how deep runs can nest,
and why the composition terminates.
"""

from __future__ import annotations

import json
import re
from typing import Literal, cast

import attrs
import graphviz

from agent_fsm.diagrams.dot import _DOT_STATE, DEFAULT_DIRECTION, Direction, GraphvizMissing, fit
from agent_fsm.diagrams.labels import edge_label, paused_note
from agent_fsm.diagrams.mermaid import _MERMAID_CLASSES, mermaid_text
from agent_fsm.engine import RUN_MACHINE, Agent, Composition, Nested, check_composition

__all__ = ["composition_dot", "composition_mermaid", "composition_title", "render_composition"]

_UNNAMED = "unnamed agent"


@attrs.define
class _Box:
    """One agent's run machine in the drawing: ``key`` prefixes its states' ids; ``calls`` are its nesting tools."""

    key: str
    agent: Agent
    title: str
    calls: list[tuple[str, Nested, _Box, bool]] = attrs.Factory(list)  # (tool, handler, box, drawn here)


def _title(name: str, tool: str, nested: Nested) -> str:
    kind = "handoff" if nested.hands_over else "as tool"
    return f"{name} ({kind})" if tool == name else f"{name} ({kind} {tool})"


def _boxes(agent: Agent) -> _Box:
    """The top agent's box, each nested agent's box inside the first box that reaches it, later ones edges back."""
    top = _Box("n0", agent, agent.name or _UNNAMED)
    drawn: dict[int, _Box] = {id(agent): top}
    todo = [top]
    while todo:
        box = todo.pop(0)
        for tool, spec in box.agent.tools.items():
            handler = spec.handler
            if not isinstance(handler, Nested):
                continue
            seen = drawn.get(id(handler.agent))
            if seen is not None:
                box.calls.append((tool, handler, seen, False))
                continue
            name = handler.agent.name or _UNNAMED
            inner = _Box(f"n{len(drawn)}", handler.agent, _title(name, tool, handler))
            drawn[id(handler.agent)] = inner
            box.calls.append((tool, handler, inner, True))
            todo.append(inner)
    return top


def composition_title(agent: Agent, composition: Composition | None = None) -> str:
    """What the drawing's title says: the agents, how deep they nest, and whether the composition terminates."""
    found = composition if composition is not None else check_composition(agent)
    count = len(found.agents)
    head = f"{agent.name or _UNNAMED}: {count} agent{'s' if count != 1 else ''}"
    if found.recursive:
        depth = f"recursive, nests at most {found.depth_bound} deep (each level has fewer turns than the one above)"
    else:
        depth = f"nests at most {found.depth_bound} deep"
    verdict = "terminates" if found.terminates else "not proved: " + "; ".join(found.problems)
    return f"{head}, {depth}; {verdict}"


def _ids(box: _Box) -> dict[str, str]:
    return {state.name: f"{box.key}_{state.name}" for state in RUN_MACHINE.states}


def _return_edges(nested: Nested) -> list[tuple[str, str]]:
    """Where the parent goes when the nested run ends or pauses: ``(parent state, label)``."""
    ending = ("HandedOver", "its part ends [handed_over]") if nested.hands_over else ("Executing", "ends: observation")
    return [ending, ("AwaitingApproval", "pauses: waits with it")]


# --- Mermaid ------------------------------------------------------------------

_SAFE_KEY = re.compile(r"n\d+")


def composition_mermaid(agent: Agent, *, direction: str | None = None) -> str:
    """
    ``agent`` and the agents it nests as a Mermaid ``stateDiagram-v2`` of composite states.

    Each agent's run machine is a composite state named for it (a nested
    one ``name (as tool)`` or ``name (handoff)``), inside the box of the
    agent that first nests it; an agent met again is an edge back to its box.
    """
    if direction is not None and direction not in ("LR", "TB", "RL", "BT"):
        raise ValueError(f"direction must be one of LR, TB, RL, BT, got {direction!r}")
    top = _boxes(agent)
    lines = [
        "---",
        f"title: {json.dumps(' '.join(composition_title(agent).split()), ensure_ascii=False)}",
        "---",
        "stateDiagram-v2",
    ]
    if direction is not None:
        lines.append(f"    direction {direction}")
    lines.append("    %% Generated from the agents' tools and the run machine declaration")
    members: dict[str, list[str]] = {"absorbing": [], "paused": []}
    lines += _mermaid_box(top, "    ", members)
    lines.append(f"    [*] --> {top.key}")
    for kind, style in _MERMAID_CLASSES.items():
        if members.get(kind):
            lines.append(f"    classDef {kind} {style}")
    for kind, ids in members.items():
        if ids:
            lines.append(f"    class {','.join(ids)} {kind}")
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    return mermaid_text(text).replace('"', "#34;").replace(":", "#58;")


def _mermaid_box(box: _Box, indent: str, members: dict[str, list[str]]) -> list[str]:
    assert _SAFE_KEY.fullmatch(box.key)
    ids = _ids(box)
    inner = indent + "    "
    lines = [f'{indent}state "{_quoted(box.title)}" as {box.key} {{', f"{inner}[*] --> {ids[RUN_MACHINE.initial]}"]
    for edge in RUN_MACHINE.edges:
        label = mermaid_text(edge_label(RUN_MACHINE, edge))
        lines.append(f"{inner}{ids[edge.source]} --> {ids[edge.dest]}: {label}")
    for state in RUN_MACHINE.states:
        if state.kind == "absorbing":
            lines.append(f"{inner}{ids[state.name]} --> [*]")
        if state.kind in members:
            members[state.kind].append(ids[state.name])
    for tool, nested, child, here in box.calls:
        if here:
            lines += _mermaid_box(child, inner, members)
            for parent_state, label in _return_edges(nested):
                lines.append(f"{inner}{child.key} --> {ids[parent_state]}: {mermaid_text(label)}")
            lines.append(f"{inner}{ids['Executing']} --> {child.key}: {mermaid_text(tool)}")
        else:  # drawn already: recursion, or a second way in
            label = mermaid_text(f"{tool} (again, drawn above: {child.title})")
            lines.append(f"{inner}{ids['Executing']} --> {child.key}: {label}")
    lines.append(f"{indent}}}")
    return lines


# --- DOT ----------------------------------------------------------------------

_FONT = "Helvetica"


def composition_dot(
    agent: Agent, *, direction: Direction = DEFAULT_DIRECTION, size: tuple[float, float] | None = None
) -> str:
    """
    ``agent`` and the agents it nests as Graphviz DOT: one cluster per agent's run machine, nested as they nest.

    The delegating call enters the nested cluster from ``Executing``; its
    ending and its pause leave it; an agent met again is a dashed edge back.
    """
    if direction not in ("LR", "TB", "RL", "BT"):
        raise ValueError(f"direction must be one of LR, TB, RL, BT, got {direction!r}")
    top = _boxes(agent)
    graph = graphviz.Digraph(f"{agent.name or 'agent'}_composition")
    graph.attr(
        rankdir=direction,
        compound="true",
        fontname=_FONT,
        fontsize="16",
        labelloc="t",
        label=graphviz.escape(composition_title(agent)),
        dpi="96",
        nodesep="0.25",
        ranksep="0.6",
    )
    fit(graph, size)
    graph.attr("node", fontname=_FONT, fontsize="13")
    graph.attr("edge", fontname=_FONT, fontsize="11")
    between: list[tuple[str, str, dict[str, str]]] = []
    _dot_box(graph, top, between)
    for tail, head, attributes in between:
        graph.edge(tail, head, **attributes)
    return cast(str, graph.source)


def _dot_box(parent: graphviz.Digraph, box: _Box, between: list[tuple[str, str, dict[str, str]]]) -> None:
    ids = _ids(box)
    with parent.subgraph(name=f"cluster_{box.key}") as cluster:
        cluster.attr(label=graphviz.escape(box.title), style="rounded", color="#495057", fontname=_FONT)
        start = f"{box.key}__start"
        cluster.node(start, label="", shape="point", width="0.15")
        for state in RUN_MACHINE.states:
            label = graphviz.escape(state.name)
            if state.kind == "paused":
                label += "\\n(" + graphviz.escape(paused_note(RUN_MACHINE, state)) + ")"
            cluster.node(ids[state.name], label=graphviz.nohtml(label), **_DOT_STATE[state.kind])
        cluster.edge(start, ids[RUN_MACHINE.initial])
        for edge in RUN_MACHINE.edges:
            cluster.edge(ids[edge.source], ids[edge.dest], label=graphviz.escape(edge_label(RUN_MACHINE, edge)))
        for tool, nested, child, here in box.calls:
            entry = f"{child.key}_{RUN_MACHINE.initial}"
            if not here:  # drawn already: recursion, or a second way in
                label = graphviz.escape(f"{tool} (again, drawn above: {child.title})")
                between.append((ids["Executing"], entry, {"label": label, "style": "dashed", "constraint": "false"}))
                continue
            _dot_box(cluster, child, between)
            cluster_name = f"cluster_{child.key}"
            between.append((ids["Executing"], entry, {"label": graphviz.escape(tool), "lhead": cluster_name}))
            for parent_state, label in _return_edges(nested):
                leaving = {"label": graphviz.escape(label), "ltail": cluster_name, "style": "dashed"}
                between.append((entry, ids[parent_state], leaving))


def render_composition(
    agent: Agent,
    format: Literal["svg", "png"],
    *,
    direction: Direction = DEFAULT_DIRECTION,
    size: tuple[float, float] | None = None,
) -> bytes:
    """
    ``agent``'s composition drawn by Graphviz's ``dot`` program, as SVG or PNG bytes.

    Raises:
        GraphvizMissing: the ``dot`` program is not on ``PATH``.
    """
    if format not in ("svg", "png"):
        raise ValueError(f"format must be 'svg' or 'png', got {format!r}")
    try:
        return cast(bytes, graphviz.Source(composition_dot(agent, direction=direction, size=size)).pipe(format=format))
    except graphviz.ExecutableNotFound as exc:
        raise GraphvizMissing(
            "Graphviz's `dot` program is not installed (on Debian or Ubuntu: apt-get install graphviz)"
        ) from exc
