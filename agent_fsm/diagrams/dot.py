"""
A machine as Graphviz DOT, and drawn as SVG or PNG by the real ``dot`` program.
"""

from __future__ import annotations

import collections
from typing import Any, Literal, cast

import graphviz

from agent_fsm.diagrams.labels import (
    check_path,
    edge_label,
    paused_note,
    taken_label,
    title_of,
)
from agent_fsm.diagrams.path import RunPath
from agent_fsm.engine import AgentFSMError, Edge, MachineSpec

__all__ = ["DEFAULT_DIRECTION", "Direction", "GraphvizMissing", "fit", "render", "to_dot"]

Direction = Literal["LR", "TB", "RL", "BT"]

# Left to right, chosen by looking at the run machine drawn both ways: top to
# bottom puts its ten endings on one rank, a strip ~2800 px wide whose labels
# cannot be read at screen size; left to right stacks them, ~2000 x 1500 px at 96 dpi.
DEFAULT_DIRECTION: Direction = "LR"
_DPI = "96"


class GraphvizMissing(AgentFSMError, RuntimeError):
    """The Graphviz ``dot`` program is not installed, so SVG or PNG cannot be drawn."""


_FONT = "Helvetica"
_DOT_STATE = {
    "working": {"shape": "box", "style": "rounded"},
    "absorbing": {"shape": "doublecircle", "style": "filled", "fillcolor": "#e9ecef", "fontsize": "13"},
    "paused": {"shape": "box", "style": "rounded,dashed,filled", "fillcolor": "#fff3bf", "color": "#f08c00"},
}


def to_dot(
    machine: MachineSpec,
    *,
    path: RunPath | None = None,
    direction: Direction = DEFAULT_DIRECTION,
    size: tuple[float, float] | None = None,
    title: str | None = None,
) -> str:
    """
    ``machine`` as Graphviz DOT text, laid out in ``direction``; ``size``
    (inches, width and height) scales a larger drawing down to fit.

    Absorbing states are double circles, the initial state is marked by an
    edge from a point, paused states are dashed, filled and say they are
    paused. With ``path``, visited states are green, the state the run rests
    in is outlined heavily, edges taken are bold with a count, and edges not
    taken fade. ``title`` replaces the machine's name at the top.
    """
    check_path(machine, path)
    counts = path.counts() if path is not None else collections.Counter()
    graph = graphviz.Digraph(machine.name)
    if direction not in ("LR", "TB", "RL", "BT"):
        raise ValueError(f"direction must be one of LR, TB, RL, BT, got {direction!r}")
    graph.attr(
        rankdir=direction,
        fontname=_FONT,
        fontsize="16",
        labelloc="t",
        label=graphviz.escape(title_of(machine, path, title)),
        dpi=_DPI,
        nodesep="0.25",
        ranksep="0.7",
    )
    fit(graph, size)
    graph.attr("node", fontname=_FONT, fontsize="14")
    graph.attr("edge", fontname=_FONT, fontsize="12")
    start = "__start__"
    while start in {s.name for s in machine.states}:
        start = f"_{start}_"
    graph.node(start, label="", shape="point", width="0.18")
    for state in machine.states:
        attrs_ = dict(_DOT_STATE[state.kind])
        label = graphviz.escape(state.name)
        if state.kind == "paused":
            label += "\\n(" + graphviz.escape(paused_note(machine, state)) + ")"
        if path is not None and state.name in path.visited:
            attrs_["style"] = ",".join(dict.fromkeys([*attrs_["style"].split(","), "filled"]))
            attrs_["fillcolor"] = "#d3f9d8"
            attrs_["color"] = "#2b8a3e"
            attrs_["penwidth"] = "4" if state.name == path.end else "2"
        graph.node(state.name, label=graphviz.nohtml(label), tooltip=graphviz.escape(state.doc), **attrs_)
    graph.edge(start, machine.initial)
    paused = {s.name for s in machine.states if s.kind == "paused"}
    detours = _detours(machine)
    placed: set[str] = set()
    for edge in machine.edges:
        label = edge_label(machine, edge)
        extra: dict[str, str] = {}
        # A pause is placed by the first edge into it in the table; a later one (a pause reached from
        # further along, such as an effect whose outcome is unknown) would pull it a rank over and stretch
        # the drawing, so it is drawn without a say in the ranks.
        if edge.dest in paused:
            if edge.dest in placed:
                extra["constraint"] = "false"
            placed.add(edge.dest)
        if edge in detours:
            extra["constraint"] = "false"
        if path is not None:
            if counts[edge]:
                label += f"  {taken_label(counts[edge])}"
                extra |= {"color": "#2b8a3e", "fontcolor": "#2b8a3e", "penwidth": "2.5"}
            else:
                extra |= {"color": "#adb5bd", "fontcolor": "#868e96"}
        graph.edge(edge.source, edge.dest, label=graphviz.escape(label), **extra)
    return cast(str, graph.source)


def fit(graph: Any, size: tuple[float, float] | None) -> None:
    """Bound ``graph`` to ``size`` inches (width, height) when given; refuse a size that is not two positive numbers."""
    if size is not None:
        width, height = size
        if not (width > 0 and height > 0):
            raise ValueError(f"size must be two positive numbers of inches, got {size!r}")
        graph.attr(size=f"{width:g},{height:g}")


def _detours(machine: MachineSpec) -> set[Edge]:
    """
    Edges that rejoin the main line from a detour: ``S --> D`` where ``S`` is a working state entered only
    from ``P``, ``P --> D`` comes earlier in the table, and ``S`` leads nowhere but to endings and to states
    ``P`` leads to (Ready to Compacting and back on to Proposing, or to WrappingUp). Drawn without a say in
    the ranks, so the detour sits beside the line instead of pushing everything after it a rank over.
    """
    kinds = {s.name: s.kind for s in machine.states}
    found: set[Edge] = set()
    for index, edge in enumerate(machine.edges):
        if kinds[edge.source] != "working" or kinds[edge.dest] != "working":
            continue
        sources = {e.source for e in machine.edges if e.dest == edge.source}
        onward = {e.dest for e in machine.edges if e.source == edge.source and kinds[e.dest] != "absorbing"}
        earlier = {e.source for e in machine.edges[:index] if e.dest == edge.dest}
        rejoined = {e.dest for e in machine.edges if e.source in sources}
        if len(sources) == 1 and sources <= earlier and edge.dest in onward and onward <= rejoined:
            found.add(edge)
    return found


def render(
    machine: MachineSpec,
    format: Literal["svg", "png"],
    *,
    path: RunPath | None = None,
    direction: Direction = DEFAULT_DIRECTION,
    size: tuple[float, float] | None = None,
    title: str | None = None,
) -> bytes:
    """
    ``machine`` drawn by Graphviz's ``dot`` program, as SVG or PNG bytes.

    Raises:
        GraphvizMissing: the ``dot`` program is not on ``PATH``.
    """
    if format not in ("svg", "png"):
        raise ValueError(f"format must be 'svg' or 'png', got {format!r}")
    try:
        source = to_dot(machine, path=path, direction=direction, size=size, title=title)
        return cast(bytes, graphviz.Source(source).pipe(format=format))
    except graphviz.ExecutableNotFound as exc:
        raise GraphvizMissing(
            "Graphviz's `dot` program is not installed (on Debian or Ubuntu: apt-get install graphviz)"
        ) from exc
