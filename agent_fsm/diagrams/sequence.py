"""
One run's transcript as a Mermaid ``sequenceDiagram``: model, engine, gate, tool, and a human when one was asked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from agent_fsm.diagrams.mermaid import mermaid_text
from agent_fsm.diagrams.path import CallRecord, approved_calls, state_of, turns_of
from agent_fsm.engine import Observation, RunResult, RunState, assistant_text

__all__ = ["sequence_diagram"]


_TEXT_LIMIT = 80


def _observation_text(observation: Observation) -> str:
    content = observation.content if isinstance(observation.content, str) else json.dumps(observation.content)
    return f"{observation.kind}: {content}"


def _call_lines(call: CallRecord, state: RunState, resting: bool, approved: bool = False) -> Iterator[str]:
    """
    The arrows of one proposal; ``resting`` marks the first unobserved call, where the run stopped;
    ``approved`` one a human approved after the gate asked.
    """

    def say(arrow: str, text: str) -> str:
        return f"    {arrow}: {mermaid_text(text, _TEXT_LIMIT)}"

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
    elif approved:
        yield say("engine->>gate", proposal)
        yield say("gate-->>engine", "ask")
        yield say("engine-)human", f"approve or reject {call.name} [{call.call_id}]?")
        yield say("human--)engine", "approved")
        yield say("engine->>tool", f"{call.name} {call.arguments}")
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
    order; long texts are shortened. A call a human approved or rejected
    is drawn with the human's decision (read from ``RunState.path``).

    Raises:
        TraceError: the run's record is inconsistent (see :func:`path_of`).
    """
    state = state_of(run)
    turns = turns_of(state)
    approved = approved_calls(state, turns)
    asked_human = (
        state.machine_state == "AwaitingApproval"
        or bool(approved)
        or any(call.rejected_by_human for turn in turns for call in turn.calls)
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
        lines.append(f"    Note over model,engine: {mermaid_text('task: ' + task, _TEXT_LIMIT)}")
    stopped = False  # the first call without an observation is where the run rests
    for turn in turns:
        size = f", prompt ≈ {turn.prompt_tokens} tokens" if turn.prompt_tokens is not None else ""
        if turn.message is None:
            lines.append(f"    engine-xmodel: turn {turn.number}{size}")
            fault = state.fault.message if state.fault is not None else "no reply"
            lines.append(f"    Note over model,engine: {mermaid_text('provider error: ' + fault, _TEXT_LIMIT)}")
            continue
        lines.append(f"    engine->>model: turn {turn.number}{size}")
        text = assistant_text(turn.message)
        if not turn.calls:
            lines.append(f"    model-->>engine: {mermaid_text('answers: ' + (text or ''), _TEXT_LIMIT)}")
            continue
        names = ", ".join(f"{c.name} [{c.call_id}]" for c in turn.calls)
        lines.append(f"    model-->>engine: {mermaid_text('proposes ' + names, _TEXT_LIMIT)}")
        if text:
            lines.append(f"    Note over model: {mermaid_text(text, _TEXT_LIMIT)}")
        for call in turn.calls:
            unjudged = call.observation is None or call.closed
            lines.extend(_call_lines(call, state, resting=unjudged and not stopped, approved=id(call) in approved))
            stopped = stopped or unjudged
    stop = state.stop
    ending = f"stop: {stop.value}" if stop is not None else f"still working, in {state.machine_state}"
    if state.code is not None:
        ending += f" [{state.code}]"  # the world's own ending, when it named one
    if state.machine_state == "AnswerRejected" and state.judgement is not None:
        ending += f" ({state.judgement.reason})"
    lines.append(f"    Note over engine: {mermaid_text(ending, _TEXT_LIMIT)}")
    return "\n".join(lines) + "\n"
