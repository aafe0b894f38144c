"""
Diagrams drawn from the live machine declarations, and from the path one run took through them.

Nothing here is drawn by hand: every state and edge comes from a
:class:`~agent_fsm.machine.MachineSpec`, so a diagram cannot disagree with the
engine. Three outputs:

* :func:`to_mermaid`: a Mermaid ``stateDiagram-v2`` (renders on GitHub);
* :func:`to_dot` and :func:`render`: Graphviz DOT, and SVG or PNG drawn by the
  real ``dot`` program;
* :func:`sequence_diagram`: a Mermaid ``sequenceDiagram`` of one run's
  transcript (model, engine, gate, tool), the picture a reviewer draws by hand.

A run's own path (:func:`path_of`) is reconstructed from its saved state: the
transcript, the typed observations and the state it rests in. Both
renderers take it as ``path=`` and highlight the visited states and the
edges taken, with a count on each.

The ``agent-fsm diagram`` command (:func:`diagram_command`) is defined here
and registered in :mod:`agent_fsm.cli`.
"""

from __future__ import annotations

import collections
import enum
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import attrs
import graphviz
import typer

from ._exceptions import AgentFSMError
from .catalog import machines
from .machine import RUN_MACHINE, Edge, MachineSpec, StateSpec
from .observe import Observation
from .state import RunResult, RunState
from .wire import assistant_text

__all__ = [
    "REGENERATE_COMMAND",
    "TRACE_KEY",
    "GraphvizMissing",
    "RunPath",
    "TraceError",
    "diagram_command",
    "load_trace",
    "path_of",
    "reconstruct_path",
    "render",
    "sequence_diagram",
    "to_dot",
    "to_mermaid",
    "write_all",
]

REGENERATE_COMMAND = "agent-fsm diagram --all --output diagrams/"
"""The one command that regenerates the committed ``diagrams/`` folder."""

TRACE_KEY = "state"
"""A trace file is a saved :class:`RunState`, or a JSON object holding one under this key."""


class TraceError(AgentFSMError, ValueError):
    """
    A saved run could not be read, or its record does not fit the run machine.

    Subclasses ``ValueError``: it is bad input, like any unreadable file.
    """


class GraphvizMissing(AgentFSMError, RuntimeError):
    """The Graphviz ``dot`` program is not installed, so SVG or PNG cannot be drawn."""


# ---------------------------------------------------------------------------
# A run's path through a machine
# ---------------------------------------------------------------------------


@attrs.frozen
class RunPath:
    """
    The edges one run took through ``machine``, in order, starting at its initial state.

    Build it with :func:`path_of` (from a run) or :meth:`from_steps` (from
    ``(source, event, dest)`` triples recorded elsewhere).
    """

    machine: MachineSpec
    steps: tuple[Edge, ...]

    @classmethod
    def from_steps(cls, machine: MachineSpec, steps: Iterable[tuple[str, str, str]]) -> RunPath:
        """
        A path from ``(source, event, dest)`` triples.

        Raises:
            TraceError: a triple is not an edge of ``machine``, or does not start
                where the previous one ended.
        """
        found: list[Edge] = []
        where = machine.initial
        for index, (source, event, dest) in enumerate(steps):
            if source != where:
                raise TraceError(f"step {index} leaves {source!r} but the path is in {where!r}")
            found.append(_edge(machine, source, event, dest))
            where = dest
        return cls(machine, tuple(found))

    @property
    def end(self) -> str:
        """The state the run is in at the end of the path."""
        return self.steps[-1].dest if self.steps else self.machine.initial

    @property
    def visited(self) -> set[str]:
        """Every state the run was in, the initial one included."""
        return {self.machine.initial, *(edge.dest for edge in self.steps)}

    def counts(self) -> collections.Counter[Edge]:
        """How many times each edge was taken."""
        return collections.Counter(self.steps)


def _edge(machine: MachineSpec, source: str, event: str, dest: str) -> Edge:
    for edge in machine.edges:
        if (edge.source, edge.event, edge.dest) == (source, event, dest):
            return edge
    raise TraceError(f"machine {machine.name!r} has no edge {source} --{event}--> {dest}")


def load_trace(text: str) -> RunState:
    """
    Read a saved run: :meth:`RunState.to_json` output, or a JSON object holding it under ``"state"``.

    Raises:
        TraceError: the text is not JSON, or holds no saved run state.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"trace is not JSON: {exc}") from exc
    if isinstance(data, dict) and "format" not in data and TRACE_KEY in data:
        data = data[TRACE_KEY]
        if isinstance(data, str):
            data = _parse_nested(data)
    if not isinstance(data, dict):
        raise TraceError(
            f"trace must be a saved run state (RunState.to_json()) or an object with it under {TRACE_KEY!r};"
            f" got a JSON {type(data).__name__}"
        )
    try:
        return RunState.from_json(json.dumps(data))
    except ValueError as exc:
        raise TraceError(f"trace holds no readable run state: {exc}") from exc


def _parse_nested(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"trace's {TRACE_KEY!r} is a string that is not JSON: {exc}") from exc


@attrs.frozen
class _Call:
    """One proposal of a reply and what became of it (``observation`` is None if it never got one)."""

    call_id: str
    name: str
    arguments: str
    observation: Observation | None
    rejected_by_human: bool = False
    closed: bool = False  # answered "not run" when the run stopped before judging it


@attrs.frozen
class _Turn:
    """One model call: the reply (None when the provider failed) and its proposals."""

    number: int
    prompt_tokens: int | None
    message: Mapping[str, Any] | None
    calls: tuple[_Call, ...]


# Two marks the engine leaves in observations' text, the only record of these moves:
# resume(approve=False) words the reviewer's refusal with the first (an approval
# leaves no mark: see path_of); a run that stops with calls still pending answers
# each of them, unjudged, with the second.
_HUMAN_REJECTION = "rejected by a human reviewer:"
_NOT_RUN = "not run: the run stopped ("


def _run_messages(state: RunState) -> list[Mapping[str, Any]]:
    """The messages this run appended, after its opening (system prompt, history, task)."""
    start = state.opening
    if start == 0:  # saved before states counted their opening: the trailing assistant and tool messages
        start = len(state.messages)
        while start > 0 and state.messages[start - 1].get("role") in ("assistant", "tool"):
            start -= 1
    return state.messages[start:]


def _marked(observation: Observation | None, mark: str) -> bool:
    return (
        observation is not None
        and observation.kind == "denied"
        and isinstance(observation.content, str)
        and observation.content.startswith(mark)
    )


def _turns(state: RunState) -> list[_Turn]:
    """The run's model calls, each with its proposals matched to their observations in order."""
    observations = list(state.observations)
    taken = 0
    turns: list[_Turn] = []
    for message in _run_messages(state):
        if message.get("role") != "assistant":
            continue
        calls = []
        for item in message.get("tool_calls") or ():
            function = item.get("function") or {}
            call_id = str(item.get("id"))
            observation = None
            if taken < len(observations):
                observation = observations[taken]
                if observation.call_id != call_id:
                    raise TraceError(
                        f"observation {taken} answers call {observation.call_id!r}, but the transcript's next"
                        f" call is {call_id!r}"
                    )
                taken += 1
            calls.append(
                _Call(
                    call_id,
                    str(function.get("name")),
                    str(function.get("arguments")),
                    observation,
                    rejected_by_human=_marked(observation, _HUMAN_REJECTION),
                    closed=_marked(observation, _NOT_RUN),
                )
            )
        turns.append(_Turn(len(turns) + 1, _logged(state, len(turns)), message, tuple(calls)))
    if state.machine_state == "ProviderError":
        turns.append(_Turn(len(turns) + 1, _logged(state, len(turns)), None, ()))
    if taken != len(observations):
        raise TraceError(f"{len(observations) - taken} observation(s) answer no call in the transcript")
    if len(turns) != state.turns:
        raise TraceError(f"the transcript shows {len(turns)} model call(s) but the state counts {state.turns}")
    return turns


def _logged(state: RunState, index: int) -> int | None:
    return state.prompt_token_log[index] if index < len(state.prompt_token_log) else None


def _state_of(run: RunResult | RunState) -> RunState:
    if isinstance(run, RunResult):
        return run.state
    if isinstance(run, RunState):
        return run
    raise TypeError(f"a RunResult or RunState is expected, got {run!r} that is a {type(run)!r}")


def path_of(run: RunResult | RunState) -> RunPath:
    """
    The path ``run`` took through the run machine.

    It is read from ``state.path``, the states the engine entered; a record
    without one (saved before the path was kept, or built by hand) is
    reconstructed with :func:`reconstruct_path`.

    Raises:
        TraceError: the recorded path is not a walk through the run machine
            ending where the run rests.
    """
    state = _state_of(run)
    if not state.path:
        return reconstruct_path(state)
    machine = RUN_MACHINE
    steps = []
    for source, dest in zip([machine.initial, *state.path], state.path):
        events = {e.event for e in machine.edges if (e.source, e.dest) == (source, dest)}
        if len(events) != 1:
            raise TraceError(f"the recorded path moves {source} -> {dest}, which is not one edge of the run machine")
        steps.append((source, events.pop(), dest))
    if state.path[-1] != state.machine_state:
        raise TraceError(f"the recorded path ends in {state.path[-1]!r}, but the run rests in {state.machine_state!r}")
    return RunPath.from_steps(machine, steps)


def reconstruct_path(run: RunResult | RunState) -> RunPath:
    """
    The path ``run`` took through the run machine, reconstructed from its transcript and observations.

    Each assistant message is one ``Ready -> Proposing`` turn; each of its
    proposals went to ``Executing`` (a ``result`` or ``error`` observation;
    a permanent error hands off) or to ``Denied`` (``invalid`` or ``denied``),
    then on to the reply's next proposal or back to ``Ready``; calls the run
    answered "not run" when it stopped were never judged; the state the run
    rests in closes the path.
    A call a human *rejected* is drawn through ``AwaitingApproval``; one a
    human *approved* cannot be told from one the gate allowed (the saved state
    keeps no mark of it) and is drawn ``Proposing -> Executing``.

    Raises:
        TraceError: the record is inconsistent (an observation answers no
            call, the turn count disagrees, or the walk cannot reach the state
            the run rests in).
    """
    state = _state_of(run)
    machine, final = RUN_MACHINE, state.machine_state
    if final not in {s.name for s in machine.states}:
        raise TraceError(f"the run rests in {final!r}, which is not a state of the run machine")
    steps: list[Edge] = []
    where = machine.initial

    def go(event: str, dest: str) -> None:
        nonlocal where
        steps.append(_edge(machine, where, event, dest))
        where = dest

    turns = _turns(state)
    # No progress is detected at a denial: the last one judged, if the run stopped there.
    last_judged = next((o for o in reversed(state.observations) if not _marked(o, _NOT_RUN)), None)
    for turn in turns:
        if machine.state(where).is_resting:
            raise TraceError(f"the record goes on after the run stopped in {where!r}")
        go("next_turn", "Proposing")
        if turn.message is None:
            go("judge", "ProviderError")
            continue
        if not turn.calls:
            go("judge", final if final in ("Answered", "AnswerRejected") else "Answered")
            continue
        for index, call in enumerate(turn.calls):
            if call.observation is None or call.closed:
                break  # the run rests on this call, unjudged: closed below
            more = "Proposing" if index + 1 < len(turn.calls) else "Ready"
            if call.observation.kind in ("result", "error"):
                go("judge", "Executing")
                go("observe", "Handoff" if call.observation.permanent else more)
            else:
                if call.rejected_by_human:
                    go("judge", "AwaitingApproval")
                    go("reject", "Denied")
                else:
                    go("judge", "Denied")
                last = call.observation is last_judged
                go("observe", "NoProgress" if last and final == "NoProgress" else more)
            if machine.state(where).is_resting:
                break
    if where != final:
        closing = [e for e in machine.edges if e.source == where and e.dest == final]
        if not closing:
            raise TraceError(f"the record leads to {where!r}, but the run rests in {final!r}")
        go(closing[0].event, final)
    return RunPath(machine, tuple(steps))


# ---------------------------------------------------------------------------
# Labels shared by both renderers
# ---------------------------------------------------------------------------


def _edge_label(machine: MachineSpec, edge: Edge) -> str:
    """``event [guard]``; an unguarded edge beside guarded siblings is the ``[else]`` fallback."""
    label = edge.event
    if edge.guard:
        label += f" [{edge.guard}]"
    elif sum(1 for e in machine.edges if (e.source, e.event) == (edge.source, edge.event)) > 1:
        label += " [else]"
    if edge.consumes:
        label += f" / spends {edge.consumes}"
    return label


def _taken(count: int) -> str:
    return f"taken ×{count}"


def _paused_note(machine: MachineSpec, state: StateSpec) -> str:
    events = sorted({e.event for e in machine.edges if e.source == state.name})
    return "paused: resumes on " + " or ".join(events) if events else "paused"


def _title(machine: MachineSpec, path: RunPath | None) -> str:
    return f"{machine.name} machine" if path is None else f"{machine.name} machine: a run's path to {path.end}"


def _check_path(machine: MachineSpec, path: RunPath | None) -> None:
    if path is not None and path.machine != machine:
        raise ValueError(f"the path is through machine {path.machine.name!r}, not {machine.name!r}")


# ---------------------------------------------------------------------------
# Mermaid
# ---------------------------------------------------------------------------

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


def _mermaid_text(text: str, limit: int | None = None) -> str:
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


def to_mermaid(machine: MachineSpec, *, path: RunPath | None = None) -> str:
    """
    ``machine`` as a Mermaid ``stateDiagram-v2``.

    Every state and edge appears; edges read ``event [guard]`` (``[else]``
    for an unguarded fallback, ``/ spends <budget>`` where a budget is spent);
    absorbing states lead to ``[*]``; paused states are styled apart and
    carry a note naming the events that resume them. With ``path``, visited
    states are highlighted, the state the run rests in most, and each edge
    taken says how often.
    """
    _check_path(machine, path)
    ids = _mermaid_ids(machine)
    counts = path.counts() if path is not None else collections.Counter()
    lines = [
        "---",
        # The title is YAML front matter: a JSON string is a YAML string, so any name is safe.
        f"title: {json.dumps(' '.join(_title(machine, path).split()), ensure_ascii=False)}",
        "---",
        "stateDiagram-v2",
        f"    %% Generated from the {machine.name!r} machine declaration; regenerate with: {REGENERATE_COMMAND}",
    ]
    mentioned = {e.source for e in machine.edges} | {e.dest for e in machine.edges} | {machine.initial}
    for state in machine.states:
        if ids[state.name] != state.name:
            quoted = _mermaid_text(state.name).replace('"', "#34;").replace(":", "#58;")
            lines.append(f'    state "{quoted}" as {ids[state.name]}')
        elif state.name not in mentioned and state.kind != "absorbing":
            lines.append(f"    {state.name}")
    lines.append(f"    [*] --> {ids[machine.initial]}")
    for edge in machine.edges:
        label = _edge_label(machine, edge)
        if counts[edge]:
            label += f" ({_taken(counts[edge])})"
        lines.append(f"    {ids[edge.source]} --> {ids[edge.dest]}: {_mermaid_text(label)}")
    for state in machine.states:
        if state.kind == "absorbing":
            lines.append(f"    {ids[state.name]} --> [*]")
    for state in machine.states:
        if state.kind == "paused":
            lines += [
                f"    note right of {ids[state.name]}",
                f"        {_mermaid_text(_paused_note(machine, state))}",
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


# ---------------------------------------------------------------------------
# Graphviz
# ---------------------------------------------------------------------------

_FONT = "Helvetica"
_DOT_STATE = {
    "working": {"shape": "box", "style": "rounded"},
    "absorbing": {"shape": "doublecircle", "style": "filled", "fillcolor": "#e9ecef", "fontsize": "11"},
    "paused": {"shape": "box", "style": "rounded,dashed,filled", "fillcolor": "#fff3bf", "color": "#f08c00"},
}


def to_dot(machine: MachineSpec, *, path: RunPath | None = None) -> str:
    """
    ``machine`` as Graphviz DOT text.

    Absorbing states are double circles, the initial state is marked by an
    edge from a point, paused states are dashed, filled and say they are
    paused. With ``path``, visited states are green, the state the run rests
    in is outlined heavily, edges taken are bold with a count, and edges not
    taken fade.
    """
    _check_path(machine, path)
    counts = path.counts() if path is not None else collections.Counter()
    graph = graphviz.Digraph(machine.name)
    graph.attr(rankdir="TB", fontname=_FONT, labelloc="t", label=graphviz.escape(_title(machine, path)))
    graph.attr("node", fontname=_FONT)
    graph.attr("edge", fontname=_FONT, fontsize="10")
    start = "__start__"
    while start in {s.name for s in machine.states}:
        start = f"_{start}_"
    graph.node(start, label="", shape="point", width="0.18")
    for state in machine.states:
        attrs_ = dict(_DOT_STATE[state.kind])
        label = graphviz.escape(state.name)
        if state.kind == "paused":
            label += "\\n(" + graphviz.escape(_paused_note(machine, state)) + ")"
        if path is not None and state.name in path.visited:
            attrs_["style"] = ",".join(dict.fromkeys([*attrs_["style"].split(","), "filled"]))
            attrs_["fillcolor"] = "#d3f9d8"
            attrs_["color"] = "#2b8a3e"
            attrs_["penwidth"] = "4" if state.name == path.end else "2"
        graph.node(state.name, label=graphviz.nohtml(label), tooltip=graphviz.escape(state.doc), **attrs_)
    graph.edge(start, machine.initial)
    for edge in machine.edges:
        label = _edge_label(machine, edge)
        extra: dict[str, str] = {}
        if path is not None:
            if counts[edge]:
                label += f"  {_taken(counts[edge])}"
                extra = {"color": "#2b8a3e", "fontcolor": "#2b8a3e", "penwidth": "2.5"}
            else:
                extra = {"color": "#adb5bd", "fontcolor": "#868e96"}
        graph.edge(edge.source, edge.dest, label=graphviz.escape(label), **extra)
    return graph.source


def render(machine: MachineSpec, format: Literal["svg", "png"], *, path: RunPath | None = None) -> bytes:
    """
    ``machine`` drawn by Graphviz's ``dot`` program, as SVG or PNG bytes.

    Raises:
        GraphvizMissing: the ``dot`` program is not on ``PATH``.
    """
    if format not in ("svg", "png"):
        raise ValueError(f"format must be 'svg' or 'png', got {format!r}")
    try:
        return graphviz.Source(to_dot(machine, path=path)).pipe(format=format)
    except graphviz.ExecutableNotFound as exc:
        raise GraphvizMissing(
            "Graphviz's `dot` program is not installed (on Debian or Ubuntu: apt-get install graphviz)"
        ) from exc


# ---------------------------------------------------------------------------
# A run's transcript as a sequence diagram
# ---------------------------------------------------------------------------

_TEXT_LIMIT = 80


def _observation_text(observation: Observation) -> str:
    content = observation.content if isinstance(observation.content, str) else json.dumps(observation.content)
    return f"{observation.kind}: {content}"


def _call_lines(call: _Call, state: RunState, resting: bool) -> Iterator[str]:
    """The arrows of one proposal; ``resting`` marks the first unobserved call, where the run stopped."""

    def say(arrow: str, text: str) -> str:
        return f"    {arrow}: {_mermaid_text(text, _TEXT_LIMIT)}"

    observation = None if call.closed else call.observation
    proposal = f"{call.name} {call.arguments} [{call.call_id}]"
    if observation is None:
        if resting and state.machine_state == "AwaitingApproval":
            reason = state.judgement.reason if state.judgement is not None else ""
            yield say("engine->>gate", proposal)
            yield say("gate-->>engine", f"ask: {reason}")
            yield say("engine-)human", f"approve or reject {call.name} [{call.call_id}]?")
        elif resting and state.machine_state == "ToolLimit":
            yield say("Note over engine", f"tool budget spent: {call.name} [{call.call_id}] is not run")
        elif resting and state.stop is None:
            yield say("Note over engine", f"{call.name} [{call.call_id}] was in {state.machine_state} when saved")
        elif state.machine_state == "AwaitingApproval":
            yield say("Note over engine", f"{call.name} [{call.call_id}] waits behind the paused call")
        else:
            yield say("Note over engine", f"{call.name} [{call.call_id}] is not judged: the run stopped first")
        if call.closed:
            yield say("engine-->>model", f"tool message [{call.call_id}] denied: not run")
        return
    if observation.kind == "invalid":
        yield say("Note over engine", f"invalid proposal: {observation.content}")
    elif call.rejected_by_human:
        yield say("engine->>gate", proposal)
        yield say("gate-->>engine", "ask")
        yield say("engine-)human", f"approve or reject {call.name} [{call.call_id}]?")
        yield say("human--)engine", str(observation.content))
    elif observation.kind == "denied":
        yield say("engine->>gate", proposal)
        yield say("gate-->>engine", f"deny: {observation.content}")
    else:
        yield say("engine->>gate", proposal)
        yield say("gate-->>engine", "allow")
        yield say("engine->>tool", f"{call.name} {call.arguments}")
        yield say("tool-->>engine", ("permanent " if observation.permanent else "") + _observation_text(observation))
    yield say("engine-->>model", f"tool message [{call.call_id}] {observation.kind}")


def sequence_diagram(run: RunResult | RunState) -> str:
    """
    A Mermaid ``sequenceDiagram`` of one run: model, engine, gate and tool (and a human when one was asked).

    Each model call, each proposal's way through validation, the gate and
    the tool, each observation sent back, and the typed ending are drawn in
    order; long texts are shortened. A call a human approved is drawn as
    allowed (the saved state does not record the approval).

    Raises:
        TraceError: the run's record is inconsistent (see :func:`path_of`).
    """
    state = _state_of(run)
    turns = _turns(state)
    asked_human = state.machine_state == "AwaitingApproval" or any(
        call.rejected_by_human for turn in turns for call in turn.calls
    )
    task = next((m.get("content") for m in reversed(state.messages) if m.get("role") == "user"), None)
    lines = [
        "sequenceDiagram",
        "    participant model",
        "    participant engine",
        "    participant gate",
        "    participant tool",
    ]
    if asked_human:
        lines.append("    participant human")
    if isinstance(task, str):
        lines.append(f"    Note over model,engine: {_mermaid_text('task: ' + task, _TEXT_LIMIT)}")
    stopped = False  # the first call without an observation is where the run rests
    for turn in turns:
        size = f", prompt ≈ {turn.prompt_tokens} tokens" if turn.prompt_tokens is not None else ""
        if turn.message is None:
            lines.append(f"    engine-xmodel: turn {turn.number}{size}")
            fault = state.fault.message if state.fault is not None else "no reply"
            lines.append(f"    Note over model,engine: {_mermaid_text('provider error: ' + fault, _TEXT_LIMIT)}")
            continue
        lines.append(f"    engine->>model: turn {turn.number}{size}")
        text = assistant_text(turn.message)
        if not turn.calls:
            lines.append(f"    model-->>engine: {_mermaid_text('answers: ' + (text or ''), _TEXT_LIMIT)}")
            continue
        names = ", ".join(f"{c.name} [{c.call_id}]" for c in turn.calls)
        lines.append(f"    model-->>engine: {_mermaid_text('proposes ' + names, _TEXT_LIMIT)}")
        if text:
            lines.append(f"    Note over model: {_mermaid_text(text, _TEXT_LIMIT)}")
        for call in turn.calls:
            unjudged = call.observation is None or call.closed
            lines.extend(_call_lines(call, state, resting=unjudged and not stopped))
            stopped = stopped or unjudged
    stop = state.stop
    ending = f"stop: {stop.value}" if stop is not None else f"still working, in {state.machine_state}"
    if state.machine_state == "AnswerRejected" and state.judgement is not None:
        ending += f" ({state.judgement.reason})"
    lines.append(f"    Note over engine: {_mermaid_text(ending, _TEXT_LIMIT)}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Files and the command line
# ---------------------------------------------------------------------------


def write_all(folder: Path) -> list[Path]:
    """
    Write ``<name>.mmd``, ``<name>.dot`` and ``<name>.svg`` for every machine in the catalog.

    Returns:
        The files written, in catalog order.

    Raises:
        GraphvizMissing: ``dot`` is not installed (nothing is written then).
    """
    folder.mkdir(parents=True, exist_ok=True)
    contents: dict[Path, bytes] = {}
    for name, machine in machines().items():
        contents[folder / f"{name}.mmd"] = to_mermaid(machine).encode()
        contents[folder / f"{name}.dot"] = to_dot(machine).encode()
        contents[folder / f"{name}.svg"] = render(machine, "svg")
    for file, data in contents.items():
        file.write_bytes(data)
    return list(contents)


class Format(str, enum.Enum):
    """Output formats of ``agent-fsm diagram``."""

    mermaid = "mermaid"
    dot = "dot"
    svg = "svg"
    png = "png"


_SUFFIX = {Format.mermaid: "mmd", Format.dot: "dot", Format.svg: "svg", Format.png: "png"}


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def diagram_command(
    machine: Annotated[
        str | None,
        typer.Option("--machine", "-m", help="Machine to draw, by catalog name (default: run).", show_default=False),
    ] = None,
    format: Annotated[
        Format, typer.Option("--format", "-f", help="mermaid or dot (text), svg or png (drawn by Graphviz's dot).")
    ] = Format.mermaid,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="File to write (a folder takes <machine>.<ext>); with --all, the folder. Default: standard output.",
            show_default=False,
        ),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            "-t",
            help=f"Saved run (RunState.to_json(), or a JSON object with it under {TRACE_KEY!r}): draw its path.",
            show_default=False,
        ),
    ] = None,
    sequence: Annotated[
        bool, typer.Option("--sequence", help="With --trace: draw the run's transcript as a Mermaid sequence diagram.")
    ] = False,
    all_: Annotated[
        bool, typer.Option("--all", help="Write .mmd, .dot and .svg of every catalog machine into --output.")
    ] = False,
) -> None:
    """
    Draw a machine from its live declaration, or the path one saved run took through it.

    agent-fsm diagram  prints the run machine as Mermaid.

    agent-fsm diagram -f svg -o run.svg  draws it with Graphviz.

    agent-fsm diagram --trace run.json  highlights the path a saved run took.

    agent-fsm diagram --trace run.json --sequence  draws that run's transcript.

    agent-fsm diagram --all --output diagrams/  regenerates the committed diagrams.

    Exit status: 0 done, 1 failed (the message says why), 2 usage error.
    """
    if all_:
        if output is None:
            raise typer.BadParameter("--all writes files: give the folder with --output", param_hint="--all")
        if trace is not None or machine is not None or sequence or format is not Format.mermaid:
            raise typer.BadParameter("--all takes only --output", param_hint="--all")
    if sequence and trace is None:
        raise typer.BadParameter("a sequence diagram is drawn from a run: give --trace", param_hint="--sequence")
    if sequence and format is not Format.mermaid:
        raise typer.BadParameter("sequence diagrams are Mermaid only", param_hint="--format")
    if trace is not None and machine not in (None, RUN_MACHINE.name):
        raise typer.BadParameter(
            f"a saved run is a path through the {RUN_MACHINE.name!r} machine", param_hint="--machine"
        )
    if format is Format.png and output is None:
        raise typer.BadParameter("PNG is binary: give a file with --output", param_hint="--format")
    name = machine or RUN_MACHINE.name
    if name not in machines():
        raise _fail(f"unknown machine {name!r} (known: {', '.join(machines())})")
    try:
        if all_:
            assert output is not None
            for file in write_all(output):
                typer.echo(str(file))
            return
        data = _draw(machines()[name], format, trace, sequence)
    except (TraceError, GraphvizMissing) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot write {exc.filename}: {exc.strerror}" if exc.filename else str(exc)) from None
    if output is None:
        typer.echo(data.decode(), nl=False)
        return
    if output.is_dir():
        output = output / f"{'sequence' if sequence else name}.{_SUFFIX[format]}"
    try:
        output.write_bytes(data)
    except OSError as exc:
        raise _fail(f"cannot write {output}: {exc.strerror}") from None


def _draw(machine: MachineSpec, format: Format, trace: Path | None, sequence: bool) -> bytes:
    path = None
    if trace is not None:
        try:
            text = trace.read_text(encoding="utf-8")
        except OSError as exc:
            raise TraceError(f"cannot read trace {trace}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise TraceError(f"trace {trace} is not UTF-8 text: {exc.reason}") from None
        state = load_trace(text)
        if sequence:
            return sequence_diagram(state).encode()
        path = path_of(state)
    if format is Format.mermaid:
        return to_mermaid(machine, path=path).encode()
    if format is Format.dot:
        return to_dot(machine, path=path).encode()
    return render(machine, format.value, path=path)
