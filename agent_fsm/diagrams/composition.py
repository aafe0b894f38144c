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

Each box holds its agent's machine as configured (:meth:`agent_fsm.Agent.machine`),
restricted by the limits a run nested there is held to (a parent's money,
time or tool budget binds its nested runs too); ``full=True`` draws the whole
run machine in every box. The same boxes, built from a saved run and the
runs nested in its calls (``RunState.children``), draw each run's path
(:func:`runs_mermaid`, :func:`runs_dot`).
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Iterator
from typing import Literal, cast

import attrs
import graphviz

from agent_fsm.diagrams.dot import _DOT_STATE, DEFAULT_DIRECTION, Direction, GraphvizMissing, fit
from agent_fsm.diagrams.labels import edge_label, paused_note, taken_label
from agent_fsm.diagrams.mermaid import _MERMAID_CLASSES, mermaid_text
from agent_fsm.diagrams.path import RunPath, path_of, state_of
from agent_fsm.engine import (
    RUN_MACHINE,
    Agent,
    Composition,
    Limits,
    MachineSpec,
    Nested,
    RunResult,
    RunState,
    check_composition,
    held_limits,
)

__all__ = [
    "composition_dot",
    "composition_mermaid",
    "composition_title",
    "drawn",
    "render_composition",
    "runs_dot",
    "runs_mermaid",
]

_UNNAMED = "unnamed agent"


@attrs.define
class _Box:
    """
    One run machine in the drawing: ``key`` prefixes its states' ids; ``calls`` are the runs nested in it.

    Each call is ``(label, hands over, box, drawn here)``; a box met again (recursion) is drawn once.
    ``path`` is the path a run took through it, when the drawing is of runs.
    """

    key: str
    title: str
    machine: MachineSpec
    calls: list[tuple[str, bool, _Box, bool]] = attrs.Factory(list)
    path: RunPath | None = None


def _title(name: str, tool: str, hands_over: bool) -> str:
    kind = "handoff" if hands_over else "as tool"
    return f"{name} ({kind})" if tool == name else f"{name} ({kind} {tool})"


def _limits(agent: Agent) -> Limits:
    return agent.limits if agent.limits is not None else Limits()  # the defaults, as a run starts with


def _boxes(agent: Agent, full: bool) -> _Box:
    """
    The top agent's box, each nested agent's box inside the first box that reaches it, later ones edges back.

    Each box holds its agent's machine as configured, under the limits a run nested there is held to
    (``full``: the whole table).
    """

    def machine(of: Agent, held: Limits) -> MachineSpec:
        return RUN_MACHINE if full else of.machine(limits=held)

    top = _Box("n0", agent.name or _UNNAMED, machine(agent, _limits(agent)))
    drawn: dict[int, _Box] = {id(agent): top}
    todo = [(top, agent, _limits(agent))]
    while todo:
        box, current, held = todo.pop(0)
        for tool, spec in current.tools.items():
            handler = spec.handler
            if not isinstance(handler, Nested):
                continue
            seen = drawn.get(id(handler.agent))
            if seen is not None:
                box.calls.append((tool, handler.hands_over, seen, False))
                continue
            name = handler.agent.name or _UNNAMED
            below = held_limits(handler.agent, held)
            inner = _Box(f"n{len(drawn)}", _title(name, tool, handler.hands_over), machine(handler.agent, below))
            drawn[id(handler.agent)] = inner
            box.calls.append((tool, handler.hands_over, inner, True))
            todo.append((inner, handler.agent, below))
    return top


def _run_boxes(run: RunResult | RunState, agent: Agent | None, full: bool) -> _Box:
    """
    A run's box and, inside it, a box per run nested in its calls (and theirs), each with the path it took.

    With ``agent`` (the one that ran it), each box is that run's agent's machine, restricted by the limits
    the run was held to; without it, or ``full``, the whole table.
    """
    count = 0

    def box_of(state: RunState, who: Agent | None, title: str) -> _Box:
        nonlocal count
        machine = RUN_MACHINE if full or who is None else who.machine(limits=state.limits)
        box = _Box(f"n{count}", title, machine, path=path_of(state, machine=machine))
        count += 1
        names = _call_names(state)
        for call_id, child in state.children.items():
            tool = names.get(call_id, "?")
            spec = who.tools.get(tool) if who is not None else None
            handler = spec.handler if spec is not None else None
            nested = handler.agent if isinstance(handler, Nested) else None
            hands_over = isinstance(handler, Nested) and handler.hands_over
            if handler is None:  # no agent to ask: a run that ended its parent with its own was handed over to
                hands_over = state.machine_state == "HandedOver" and _last_call(state) == call_id
            inner = box_of(child, nested, f"{tool} [{call_id}]: {child.machine_state}")
            box.calls.append((tool, hands_over, inner, True))
        return box

    state = state_of(run)
    name = agent.name if agent is not None and agent.name else state.run_id or "run"
    return box_of(state, agent, name)


def _call_names(state: RunState) -> dict[str, str]:
    """The tool each call of the transcript named, by call id."""
    found: dict[str, str] = {}
    for message in state.messages:
        for item in message.get("tool_calls") or ():
            found[str(item.get("id"))] = str((item.get("function") or {}).get("name"))
    return found


def _last_call(state: RunState) -> str | None:
    return state.observations[-1].call_id if state.observations else None


def composition_title(agent: Agent, composition: Composition | None = None, *, full: bool = False) -> str:
    """What the drawing's title says: the agents, how deep they nest, and whether the composition terminates."""
    found = composition if composition is not None else check_composition(agent)
    count = len(found.agents)
    head = f"{agent.name or _UNNAMED}: {count} agent{'s' if count != 1 else ''}"
    if found.recursive:
        depth = f"recursive, nests at most {found.depth_bound} deep (each level has fewer turns than the one above)"
    else:
        depth = f"nests at most {found.depth_bound} deep"
    verdict = "terminates" if found.terminates else "not proved: " + "; ".join(found.problems)
    view = "the whole run machine in each" if full else "each agent's machine as configured"
    return f"{head}, {depth}; {verdict}; {view}"


def _runs_title(top: _Box) -> str:
    inner = sum(1 for _ in _all_boxes(top)) - 1
    assert top.path is not None
    return f"{top.title}: a run's path to {top.path.end}, with the {inner} run{'s' if inner != 1 else ''} nested in it"


def _all_boxes(box: _Box) -> Iterator[_Box]:
    yield box
    for _tool, _hands, child, here in box.calls:
        if here:
            yield from _all_boxes(child)


def _ids(box: _Box) -> dict[str, str]:
    return {state.name: f"{box.key}_{state.name}" for state in box.machine.states}


def _return_edges(hands_over: bool) -> list[tuple[str, str]]:
    """Where the parent goes when the nested run ends or pauses: ``(parent state, label)``."""
    ending = ("HandedOver", "its part ends [handed_over]") if hands_over else ("Executing", "ends: observation")
    return [ending, ("AwaitingApproval", "pauses: waits with it")]


# --- Mermaid ------------------------------------------------------------------

_SAFE_KEY = re.compile(r"n\d+")


def composition_mermaid(agent: Agent, *, direction: str | None = None, full: bool = False) -> str:
    """
    ``agent`` and the agents it nests as a Mermaid ``stateDiagram-v2`` of composite states.

    Each agent's machine as configured (``full``: the whole run machine) is a
    composite state named for it (a nested one ``name (as tool)`` or
    ``name (handoff)``), inside the box of the agent that first nests it; an
    agent met again is an edge back to its box.
    """
    return _mermaid(_boxes(agent, full), composition_title(agent, full=full), direction)


def runs_mermaid(
    run: RunResult | RunState, *, agent: Agent | None = None, direction: str | None = None, full: bool = False
) -> str:
    """
    A run and the runs nested in its calls as a Mermaid ``stateDiagram-v2``, each with the path it took.

    Each run is a composite state holding its machine (its agent's as configured, given ``agent``; else, or
    ``full``, the whole table) with the states it visited and the edges it took highlighted, the runs
    nested in its calls inside it.

    Raises:
        TraceError: a run's record is not a walk through its machine.
    """
    top = _run_boxes(run, agent, full)
    return _mermaid(top, _runs_title(top), direction)


def _mermaid(top: _Box, title: str, direction: str | None) -> str:
    if direction is not None and direction not in ("LR", "TB", "RL", "BT"):
        raise ValueError(f"direction must be one of LR, TB, RL, BT, got {direction!r}")
    lines = [
        "---",
        f"title: {json.dumps(' '.join(title.split()), ensure_ascii=False)}",
        "---",
        "stateDiagram-v2",
    ]
    if direction is not None:
        lines.append(f"    direction {direction}")
    lines.append("    %% Generated from the agents' tools and the run machine declaration")
    members: dict[str, list[str]] = {kind: [] for kind in _MERMAID_CLASSES}
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
    machine, path = box.machine, box.path
    counts = path.counts() if path is not None else collections.Counter()
    inner = indent + "    "
    lines = [f'{indent}state "{_quoted(box.title)}" as {box.key} {{', f"{inner}[*] --> {ids[machine.initial]}"]
    for edge in machine.edges:
        label = edge_label(machine, edge) + (f" ({taken_label(counts[edge])})" if counts[edge] else "")
        lines.append(f"{inner}{ids[edge.source]} --> {ids[edge.dest]}: {mermaid_text(label)}")
    for state in machine.states:
        if state.kind == "absorbing":
            lines.append(f"{inner}{ids[state.name]} --> [*]")
        if path is not None and state.name == path.end:
            members["ended"].append(ids[state.name])
        elif path is not None and state.name in path.visited:
            members["visited"].append(ids[state.name])
        elif state.kind in ("absorbing", "paused"):
            members[state.kind].append(ids[state.name])
    for tool, hands_over, child, here in box.calls:
        if here:
            lines += _mermaid_box(child, inner, members)
            for parent_state, label in _return_edges(hands_over):
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
    agent: Agent,
    *,
    direction: Direction = DEFAULT_DIRECTION,
    size: tuple[float, float] | None = None,
    full: bool = False,
) -> str:
    """
    ``agent`` and the agents it nests as Graphviz DOT: one cluster per agent's machine, nested as they nest.

    Each cluster holds its agent's machine as configured (``full``: the whole
    run machine). The delegating call enters the nested cluster from
    ``Executing``; its ending and its pause leave it; an agent met again is a
    dashed edge back.
    """
    return _dot(_boxes(agent, full), f"{agent.name or 'agent'}_composition", composition_title(agent, full=full),
                direction, size)  # fmt: skip


def runs_dot(
    run: RunResult | RunState,
    *,
    agent: Agent | None = None,
    direction: Direction = DEFAULT_DIRECTION,
    size: tuple[float, float] | None = None,
    full: bool = False,
) -> str:
    """
    A run and the runs nested in its calls as Graphviz DOT clusters, each with the path it took highlighted.

    Raises:
        TraceError: a run's record is not a walk through its machine.
    """
    top = _run_boxes(run, agent, full)
    return _dot(top, "runs", _runs_title(top), direction, size)


def _dot(top: _Box, name: str, title: str, direction: Direction, size: tuple[float, float] | None) -> str:
    if direction not in ("LR", "TB", "RL", "BT"):
        raise ValueError(f"direction must be one of LR, TB, RL, BT, got {direction!r}")
    graph = graphviz.Digraph(name)
    graph.attr(
        rankdir=direction,
        compound="true",
        fontname=_FONT,
        fontsize="16",
        labelloc="t",
        label=graphviz.escape(title),
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
    machine, path = box.machine, box.path
    counts = path.counts() if path is not None else collections.Counter()
    with parent.subgraph(name=f"cluster_{box.key}") as cluster:
        cluster.attr(label=graphviz.escape(box.title), style="rounded", color="#495057", fontname=_FONT)
        start = f"{box.key}__start"
        cluster.node(start, label="", shape="point", width="0.15")
        for state in machine.states:
            label = graphviz.escape(state.name)
            if state.kind == "paused":
                label += "\\n(" + graphviz.escape(paused_note(machine, state)) + ")"
            look = dict(_DOT_STATE[state.kind])
            if path is not None and state.name in path.visited:
                look |= {"style": ",".join(dict.fromkeys([*look["style"].split(","), "filled"])),
                         "fillcolor": "#d3f9d8", "color": "#2b8a3e",
                         "penwidth": "4" if state.name == path.end else "2"}  # fmt: skip
            cluster.node(ids[state.name], label=graphviz.nohtml(label), **look)
        cluster.edge(start, ids[machine.initial])
        for edge in machine.edges:
            label = edge_label(machine, edge)
            extra: dict[str, str] = {}
            if path is not None:
                if counts[edge]:
                    label += f"  {taken_label(counts[edge])}"
                    extra = {"color": "#2b8a3e", "fontcolor": "#2b8a3e", "penwidth": "2.5"}
                else:
                    extra = {"color": "#adb5bd", "fontcolor": "#868e96"}
            cluster.edge(ids[edge.source], ids[edge.dest], label=graphviz.escape(label), **extra)
        for tool, hands_over, child, here in box.calls:
            entry = f"{child.key}_{child.machine.initial}"
            if not here:  # drawn already: recursion, or a second way in
                label = graphviz.escape(f"{tool} (again, drawn above: {child.title})")
                between.append((ids["Executing"], entry, {"label": label, "style": "dashed", "constraint": "false"}))
                continue
            _dot_box(cluster, child, between)
            cluster_name = f"cluster_{child.key}"
            between.append((ids["Executing"], entry, {"label": graphviz.escape(tool), "lhead": cluster_name}))
            for parent_state, label in _return_edges(hands_over):
                leaving = {"label": graphviz.escape(label), "ltail": cluster_name, "style": "dashed"}
                between.append((entry, ids[parent_state], leaving))


def render_composition(
    agent: Agent,
    format: Literal["svg", "png"],
    *,
    direction: Direction = DEFAULT_DIRECTION,
    size: tuple[float, float] | None = None,
    full: bool = False,
) -> bytes:
    """
    ``agent``'s composition drawn by Graphviz's ``dot`` program, as SVG or PNG bytes.

    Raises:
        GraphvizMissing: the ``dot`` program is not on ``PATH``.
    """
    return drawn(composition_dot(agent, direction=direction, size=size, full=full), format)


def drawn(source: str, format: Literal["svg", "png"]) -> bytes:
    """
    DOT ``source`` drawn by Graphviz's ``dot`` program, as SVG or PNG bytes.

    Raises:
        GraphvizMissing: the ``dot`` program is not on ``PATH``.
    """
    if format not in ("svg", "png"):
        raise ValueError(f"format must be 'svg' or 'png', got {format!r}")
    try:
        return cast(bytes, graphviz.Source(source).pipe(format=format))
    except graphviz.ExecutableNotFound as exc:
        raise GraphvizMissing(
            "Graphviz's `dot` program is not installed (on Debian or Ubuntu: apt-get install graphviz)"
        ) from exc
