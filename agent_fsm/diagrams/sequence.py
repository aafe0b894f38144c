"""
One run's transcript as a Mermaid ``sequenceDiagram``: model, engine, gate, tool, and a human when one was asked.
"""

from __future__ import annotations

import json

from agent_fsm.diagrams.mermaid import mermaid_text
from agent_fsm.diagrams.path import CallRecord, approved_calls, state_of, turns_of
from agent_fsm.engine import Observation, RunResult, RunState, assistant_text

__all__ = ["sequence_diagram"]


_TEXT_LIMIT = 80

_ROLES = ("model", "engine", "gate", "tool", "human")


def _observation_text(observation: Observation) -> str:
    content = observation.content if isinstance(observation.content, str) else json.dumps(observation.content)
    return f"{observation.kind}: {content}"


class _Drawing:
    """The participants declared so far and the lines drawn: a run's, and those of the runs nested in it."""

    def __init__(self) -> None:
        self.participants: list[str] = []
        self.lines: list[str] = []
        self.nested = 0

    def say(self, arrow: str, text: str) -> None:
        self.lines.append(f"    {arrow}: {mermaid_text(text, _TEXT_LIMIT)}")


def _who(prefix: str) -> dict[str, str]:
    return {role: f"{prefix}{role}" for role in _ROLES}


def _call_lines(
    drawing: _Drawing, call: CallRecord, state: RunState, who: dict[str, str], resting: bool, approved: bool = False
) -> None:
    """
    The arrows of one proposal; ``resting`` marks the first unobserved call, where the run stopped;
    ``approved`` one a human approved after the gate asked. A call that ran an agent draws that run inside it.
    """
    model, engine, gate, tool, human = (who[role] for role in _ROLES)
    say = drawing.say
    observation = None if call.closed else call.observation
    proposal = f"{call.name} {call.arguments} [{call.call_id}]"
    child = state.children.get(call.call_id) if state.children else None
    if observation is None:
        if child is not None and not call.closed:  # the call runs an agent, which paused: the run waits with it
            say(f"{engine}->>{gate}", proposal)
            say(f"{gate}-->>{engine}", "allow")
            _nested(drawing, call, child, engine)
            say(f"Note over {engine}", f"{call.name} [{call.call_id}] waits with the run nested in it")
        elif resting and state.machine_state == "AwaitingApproval":
            reason = state.judgement.reason if state.judgement is not None else ""
            say(f"{engine}->>{gate}", proposal)
            say(f"{gate}-->>{engine}", f"ask: {reason}")
            say(f"{engine}-){human}", f"approve or reject {call.name} [{call.call_id}]?")
        elif resting and state.machine_state == "ToolLimit":
            say(f"Note over {engine}", f"tool budget spent: {call.name} [{call.call_id}] is not run")
        elif resting and state.stop is None:
            say(f"Note over {engine}", f"{call.name} [{call.call_id}] was in {state.machine_state} when saved")
        elif state.machine_state == "AwaitingApproval":
            say(f"Note over {engine}", f"{call.name} [{call.call_id}] waits behind the paused call")
        else:
            say(f"Note over {engine}", f"{call.name} [{call.call_id}] is not judged: the run stopped first")
        if call.closed:
            say(f"{engine}-->>{model}", f"tool message [{call.call_id}] denied: not run")
        return
    if observation.kind == "invalid":
        say(f"Note over {engine}", f"invalid proposal: {observation.content}")
    elif call.rejected_by_human:
        say(f"{engine}->>{gate}", proposal)
        say(f"{gate}-->>{engine}", "ask")
        say(f"{engine}-){human}", f"approve or reject {call.name} [{call.call_id}]?")
        say(f"{human}--){engine}", str(observation.content))
    elif observation.kind == "denied":
        say(f"{engine}->>{gate}", proposal)
        say(f"{gate}-->>{engine}", f"deny: {observation.content}")
    else:
        say(f"{engine}->>{gate}", proposal)
        if approved:
            say(f"{gate}-->>{engine}", "ask")
            say(f"{engine}-){human}", f"approve or reject {call.name} [{call.call_id}]?")
            say(f"{human}--){engine}", "approved")
        else:
            say(f"{gate}-->>{engine}", "allow")
        ended = ("permanent " if observation.permanent else "") + _observation_text(observation)
        if child is not None:
            nested_engine = _nested(drawing, call, child, engine)
            say(f"{nested_engine}-->>{engine}", ended)
        else:
            say(f"{engine}->>{tool}", f"{call.name} {call.arguments}")
            if not approved:
                say(f"{tool}-->>{engine}", ended)
    say(f"{engine}-->>{model}", f"tool message [{call.call_id}] {observation.kind}")


def _nested(drawing: _Drawing, call: CallRecord, child: RunState, engine: str) -> str:
    """The run nested in ``call``, drawn in a box between the parent's engine and the child's; its engine's id."""
    drawing.nested += 1
    prefix = f"n{drawing.nested}_"
    who = _who(prefix)
    label = f"{call.name} [{call.call_id}]"
    for role in _ROLES:
        if role != "human" or _asked_human(child):
            drawing.participants.append(f"    participant {who[role]} as {mermaid_text(f'{role} of {label}')}")
    drawing.lines.append("    rect rgb(243, 240, 255)")
    drawing.say(f"{engine}->>{who['engine']}", f"runs {label}")
    _run_lines(drawing, child, who)
    drawing.lines.append("    end")
    return who["engine"]


def _asked_human(state: RunState) -> bool:
    turns = turns_of(state)
    return (
        state.machine_state == "AwaitingApproval"
        or bool(approved_calls(state, turns))
        or any(call.rejected_by_human for turn in turns for call in turn.calls)
    )


def _run_lines(drawing: _Drawing, state: RunState, who: dict[str, str]) -> None:
    """One run's turns, proposals and ending, in ``drawing``, its participants named by ``who``."""
    model, engine = who["model"], who["engine"]
    turns = turns_of(state)
    approved = approved_calls(state, turns)
    say = drawing.say
    stopped = False  # the first call without an observation is where the run rests
    for turn in turns:
        size = f", prompt ≈ {turn.prompt_tokens} tokens" if turn.prompt_tokens is not None else ""
        if turn.message is None:
            drawing.lines.append(f"    {engine}-x{model}: turn {turn.number}{size}")
            fault = state.fault.message if state.fault is not None else "no reply"
            say(f"Note over {model},{engine}", "provider error: " + fault)
            continue
        drawing.lines.append(f"    {engine}->>{model}: turn {turn.number}{size}")
        text = assistant_text(turn.message)
        if not turn.calls:
            say(f"{model}-->>{engine}", "answers: " + (text or ""))
            continue
        names = ", ".join(f"{c.name} [{c.call_id}]" for c in turn.calls)
        say(f"{model}-->>{engine}", "proposes " + names)
        if text:
            say(f"Note over {model}", text)
        for call in turn.calls:
            unjudged = call.observation is None or call.closed
            _call_lines(drawing, call, state, who, resting=unjudged and not stopped, approved=id(call) in approved)
            stopped = stopped or unjudged
    stop = state.stop
    ending = f"stop: {stop.value}" if stop is not None else f"still working, in {state.machine_state}"
    if state.code is not None:
        ending += f" [{state.code}]"  # the world's own ending, when it named one
    if state.machine_state == "AnswerRejected" and state.judgement is not None:
        ending += f" ({state.judgement.reason})"
    say(f"Note over {engine}", ending)


def sequence_diagram(run: RunResult | RunState) -> str:
    """
    A Mermaid ``sequenceDiagram`` of one run: model, engine, gate and tool (and a human when one was asked).

    Each model call, each proposal's way through validation, the gate and
    the tool, each observation sent back, and the typed ending are drawn in
    order; long texts are shortened. A call a human approved or rejected
    is drawn with the human's decision (read from ``RunState.path``). A call
    that ran another agent draws that run (its own model, engine, gate and
    tool) in a box inside the call, and so on down.

    Raises:
        TraceError: the run's record is inconsistent (see :func:`path_of`).
    """
    state = state_of(run)
    drawing = _Drawing()
    drawing.participants = [f"    participant {role}" for role in _ROLES[:4]]
    if _asked_human(state):
        drawing.participants.append("    participant human")
    task = next((m.get("content") for m in reversed(state.messages) if m.get("role") == "user"), None)
    if isinstance(task, str):
        drawing.say("Note over model,engine", "task: " + task)
    _run_lines(drawing, state, _who(""))
    return "\n".join(["sequenceDiagram", *drawing.participants, *drawing.lines]) + "\n"
