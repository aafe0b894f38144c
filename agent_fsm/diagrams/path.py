"""
A run's path through a machine: read from the states a saved run entered, or reconstructed.

The engine records every state a run enters (``RunState.path``); a record
without one is reconstructed from the transcript, the typed observations and
the state the run rests in. Renderers take the result as ``path=`` and
highlight the states visited and the edges taken.
"""

from __future__ import annotations

import collections
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from agent_fsm.engine import RUN_MACHINE, Agent, AgentFSMError, Edge, MachineSpec, Observation, RunResult, RunState

__all__ = [
    "TRACE_KEY",
    "CallRecord",
    "RunPath",
    "TraceError",
    "TurnRecord",
    "approved_calls",
    "load_trace",
    "path_of",
    "path_on_agent",
    "reconstruct_path",
    "state_of",
    "turns_of",
]


TRACE_KEY = "state"
"""A trace file is a saved :class:`RunState`, or a JSON object holding one under this key."""


class TraceError(AgentFSMError, ValueError):
    """
    A saved run could not be read, or its record does not fit the run machine.

    Subclasses ``ValueError``: it is bad input, like any unreadable file.
    """


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
        TraceError: the text is not JSON (or JSON Python cannot read: nested too deep, a number
            too long), or holds no saved run state.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"trace is not JSON: {exc}") from exc
    except (ValueError, RecursionError) as exc:  # a number too long to convert; nesting deeper than Python recurses
        raise TraceError(f"trace cannot be read: {_unreadable(exc)}") from exc
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
    except (ValueError, RecursionError) as exc:
        raise TraceError(f"trace holds no readable run state: {_unreadable(exc)}") from exc


def _parse_nested(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"trace's {TRACE_KEY!r} is a string that is not JSON: {exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise TraceError(f"trace's {TRACE_KEY!r} cannot be read: {_unreadable(exc)}") from exc


def _unreadable(exc: BaseException) -> str:
    return "it nests deeper than Python can read" if isinstance(exc, RecursionError) else str(exc)


@attrs.frozen
class CallRecord:
    """One proposal of a reply and what became of it (``observation`` is None if it never got one)."""

    call_id: str
    name: str
    arguments: str
    observation: Observation | None
    rejected_by_human: bool = False
    closed: bool = False  # answered "not run" when the run stopped before judging it


@attrs.frozen
class TurnRecord:
    """One model call: the reply (None when the provider failed) and its proposals."""

    number: int
    prompt_tokens: int | None
    message: Mapping[str, Any] | None
    calls: tuple[CallRecord, ...]


# Two marks the engine leaves in observations' text, the only record of these moves:
# resume(approve=False) words the reviewer's refusal with the first (an approval
# leaves no mark: see path_of); a run that stops with calls still pending answers
# each of them, unjudged, with the second.
HUMAN_REJECTION = "rejected by a human reviewer:"
NOT_RUN = "not run: the run stopped ("


def _run_messages(state: RunState) -> list[dict[str, Any]]:
    """The messages this run appended, after its opening (system prompt, history, task)."""
    start = state.opening
    if start == 0:  # saved before states counted their opening: the trailing assistant and tool messages
        start = len(state.messages)
        while start > 0 and state.messages[start - 1].get("role") in ("assistant", "tool"):
            start -= 1
    return state.messages[start:]


def marked(observation: Observation | None, mark: str) -> bool:
    return (
        observation is not None
        and observation.kind == "denied"
        and isinstance(observation.content, str)
        and observation.content.startswith(mark)
    )


def _charged(state: RunState, call_id: str) -> int:
    """
    The model calls a run nested in ``call_id`` charged to this one: all of its own, once it ended.

    A nested run's calls are counted in its parent's ``turns`` (and its
    prompts logged in the parent's log) when it ends, right after the parent's
    call that ran it; a nested run still paused has charged nothing yet.
    """
    child = state.children.get(call_id) if state.children else None
    if child is None or child.stop is None or child.machine_state == "AwaitingApproval":
        return 0
    return child.turns


def turns_of(state: RunState) -> list[TurnRecord]:
    """
    The run's model calls, each with its proposals matched to their observations in order.

    Model calls of runs nested in its calls are numbered past, as the
    parent counted them: the numbers are the run's own count of calls.
    """
    observations = list(state.observations)
    taken = 0
    nested = 0
    turns: list[TurnRecord] = []
    # Model calls that wrote a summary for a compaction have no reply in the transcript: numbered past.
    summaries = {c.turn - 1 for c in state.compactions if c.charged}
    number = 0
    for message in _run_messages(state):
        if message.get("role") != "assistant":
            continue
        number += 1
        while number in summaries:
            number += 1
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
                CallRecord(
                    call_id,
                    str(function.get("name")),
                    str(function.get("arguments")),
                    observation,
                    rejected_by_human=marked(observation, HUMAN_REJECTION),
                    closed=marked(observation, NOT_RUN),
                )
            )
        turns.append(TurnRecord(number, _logged(state, number - 1), message, tuple(calls)))
        charged = sum(_charged(state, call.call_id) for call in calls)
        number += charged
        nested += charged
    # The call that failed is a turn, unless it was a summary's (a compaction charges only a summary made).
    if state.machine_state == "ProviderError" and state.path[-2:-1] != ["Compacting"]:
        number += 1
        while number in summaries:
            number += 1
        turns.append(TurnRecord(number, _logged(state, number - 1), None, ()))
    if taken != len(observations):
        raise TraceError(f"{len(observations) - taken} observation(s) answer no call in the transcript")
    if len(turns) + len(summaries) + nested != state.turns:
        raise TraceError(
            f"the transcript shows {len(turns)} model call(s)"
            + (f" and its nested runs {nested}" if nested else "")
            + f" but the state counts {state.turns}"
        )
    return turns


def _logged(state: RunState, index: int) -> int | None:
    return state.prompt_token_log[index] if index < len(state.prompt_token_log) else None


def state_of(run: RunResult | RunState) -> RunState:
    if isinstance(run, RunResult):
        return run.state
    if isinstance(run, RunState):
        return run
    raise TypeError(f"a RunResult or RunState is expected, got {run!r} that is a {type(run)!r}")


def path_of(run: RunResult | RunState, *, machine: MachineSpec | None = None) -> RunPath:
    """
    The path ``run`` took through the run machine, or through ``machine``, one agent's part of it.

    It is read from ``state.path``, the states the engine entered; a record
    without one (saved before the path was kept, or built by hand) is
    reconstructed with :func:`reconstruct_path`. ``machine`` is the run
    machine as the run's agent can take it (:meth:`agent_fsm.Agent.machine`).

    Raises:
        TraceError: the recorded path is not a walk through the run machine
            ending where the run rests, or takes an edge ``machine`` does not have.
    """
    state = state_of(run)
    whole = reconstruct_path(state) if not state.path else _recorded(state)
    if machine is None or machine == RUN_MACHINE:
        return whole
    try:
        return RunPath.from_steps(machine, [(e.source, e.event, e.dest) for e in whole.steps])
    except TraceError as exc:
        raise TraceError(f"{exc}: the run took a step this agent cannot; was it run configured otherwise?") from None


def path_on_agent(run: RunResult | RunState, agent: Agent | None, *, full: bool = False) -> RunPath:
    """
    The path ``run`` took, on ``agent``'s machine under the limits the run held (``full`` or no agent: the whole table).

    What every picture of a saved run draws when it knows the agent, so the
    viewer, ``agent-fsm runs show --diagram`` and ``agent-fsm diagram --world
    --trace`` show the same machine: ``path.machine``.

    Raises:
        TraceError: as :func:`path_of`, including a step the agent's machine does not have.
    """
    state = state_of(run)
    machine = RUN_MACHINE if agent is None or full else agent.machine(limits=state.limits)
    return path_of(state, machine=machine)


def _recorded(state: RunState) -> RunPath:
    machine = RUN_MACHINE
    steps = []
    for source, dest in zip([machine.initial, *state.path], state.path, strict=False):
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
    a permanent error hands off; the last call, when it ran the agent the
    run handed over to, ends it ``HandedOver``) or to ``Denied`` (``invalid`` or ``denied``),
    then on to the reply's next proposal or back to ``Ready``; calls the run
    answered "not run" when it stopped were never judged; the state the run
    rests in closes the path (through ``Executing`` when the call it waits on
    ran an agent that paused).
    A call a human *rejected* is drawn through ``AwaitingApproval``; one a
    human *approved* cannot be told from one the gate allowed (the saved state
    keeps no mark of it) and is drawn ``Proposing -> Executing``.

    Raises:
        TraceError: the record is inconsistent (an observation answers no
            call, the turn count disagrees, or the walk cannot reach the state
            the run rests in).
    """
    state = state_of(run)
    machine, final = RUN_MACHINE, state.machine_state
    if final not in {s.name for s in machine.states}:
        raise TraceError(f"the run rests in {final!r}, which is not a state of the run machine")
    steps: list[Edge] = []
    where = machine.initial

    def go(event: str, dest: str) -> None:
        nonlocal where
        steps.append(_edge(machine, where, event, dest))
        where = dest

    turns = turns_of(state)
    # No progress is detected at a denial: the last one judged, if the run stopped there.
    last_judged = next((o for o in reversed(state.observations) if not marked(o, NOT_RUN)), None)
    retries = state.output_rejections  # answers sent back as invalid typed output, as the state counts them
    for turn in turns:
        if machine.state(where).is_resting:
            raise TraceError(f"the record goes on after the run stopped in {where!r}")
        go("next_turn", "Proposing")
        if turn.message is None:
            go("judge", "ProviderError")
            continue
        if not turn.calls:
            if turn is not turns[-1]:  # an answer sent back as invalid typed output; the model answered again
                if retries == 0:
                    raise TraceError("the record goes on after the run stopped in 'Answered'")
                retries -= 1
                go("judge", "OutputInvalid")
                go("observe", "Ready")
                continue
            go("judge", final if final in ("Answered", "AnswerRejected") else "Answered")
            continue
        for index, call in enumerate(turn.calls):
            if call.observation is None or call.closed:
                break  # the run rests on this call, unjudged: closed below
            more = "Proposing" if index + 1 < len(turn.calls) else "Ready"
            if call.observation.kind in ("result", "error"):
                go("judge", "Executing")
                # the run a handoff started ended, and with it the run that handed over
                handed = final == "HandedOver" and call.observation is last_judged and call.call_id in state.children
                go("observe", "HandedOver" if handed else "Handoff" if call.observation.permanent else more)
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
    waits_nested = state.pending and state.pending[0].call_id in state.children
    if where == "Proposing" and final == "AwaitingApproval" and waits_nested:
        go("judge", "Executing")  # the call ran an agent, which paused: the run waits with it
    if where != final:
        closing = [e for e in machine.edges if e.source == where and e.dest == final]
        if not closing:
            raise TraceError(f"the record leads to {where!r}, but the run rests in {final!r}")
        go(closing[0].event, final)
    return RunPath(machine, tuple(steps))


def approved_calls(state: RunState, turns: Sequence[TurnRecord]) -> set[int]:
    """
    The executed calls a human approved, as ``id()`` of their records.

    ``state.path`` holds every state the run entered: a call executed
    straight after ``AwaitingApproval`` is one a human approved. Executions
    in the path and executed calls in the transcript come in the same order.
    """
    after_approval = [
        previous == "AwaitingApproval"
        for previous, entered in itertools.pairwise(state.path)
        if entered in ("Executing", "TakingAnswer")  # an answered call's result is the person's
    ]
    executed = [
        call
        for turn in turns
        for call in turn.calls
        if not call.closed and call.observation is not None and call.observation.kind in ("result", "error")
    ]
    if len(after_approval) != len(executed):
        return set()  # a path from an older save, or none: mark no call approved
    return {id(call) for call, approved in zip(executed, after_approval, strict=True) if approved}
