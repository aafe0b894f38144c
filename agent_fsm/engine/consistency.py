"""
Consistency of a run state: counters and indices that must agree with its transcript.

Both the saved-state reader and the driver ask this of every state they are
handed, so an edited or hand-built state is refused before anything is
decided from it. Consistency is not authenticity (see docs/security.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agent_fsm.engine.approval import call_fingerprint
from agent_fsm.engine.machine import RUN_MACHINE
from agent_fsm.engine.observe import Observation
from agent_fsm.engine.state import RunState
from agent_fsm.engine.tools import ToolCall

__all__ = ["STATES", "state_problem"]

STATES = frozenset(s.name for s in RUN_MACHINE.states)
"""The names of the run machine's states: nothing else is a machine state."""

_COUNTERS = ("turns", "tool_attempts", "opening", "message_tokens", "alternation")


def state_problem(state: RunState) -> tuple[str, str] | None:
    """
    The first way ``state`` disagrees with itself, as ``(dotted path, what is wrong)``; ``None`` if consistent.

    Checked: counters are whole numbers >= 0; one logged prompt per turn; no
    more assistant replies than turns and no fewer handler attempts than
    executed calls; observations answer this run's tool messages one to one;
    every pending call was proposed by the latest reply, is unanswered and
    carries the reply's text; a pause exactly while awaiting approval, bound
    to the blocked call.
    """
    turns, attempts, opening, tokens, alternation = (
        state.turns, state.tool_attempts, state.opening, state.message_tokens, state.alternation
    )  # fmt: skip
    counts = (turns, attempts, opening, tokens, alternation)
    if (
        type(turns) is not int or type(attempts) is not int or type(opening) is not int or type(tokens) is not int
        or type(alternation) is not int or min(counts) < 0
    ):  # fmt: skip
        for name, value in zip(_COUNTERS, counts, strict=True):
            if type(value) is not int or value < 0:
                return name, f"expected a whole number >= 0, got {value!r}"
    if state.machine_state not in STATES:
        return "machine_state", f"expected a state of the run machine, got {state.machine_state!r}"
    messages = state.messages
    if opening > len(messages):
        return "opening", f"{opening} opening messages but the transcript holds {len(messages)}"
    if len(state.prompt_token_log) != turns:
        return "turns", f"{turns} model calls but {len(state.prompt_token_log)} prompt sizes logged"
    replies = 0
    answered: list[Any] = []
    last_reply: dict[str, Any] | None = None
    since_reply = 0  # tool messages answering the latest reply
    for message in messages[opening:] if opening else messages:
        role = message.get("role")
        if role == "assistant":
            replies += 1
            last_reply = message
            since_reply = 0
        elif role == "tool":
            answered.append(message.get("tool_call_id"))
            since_reply += 1
    if replies > state.turns:
        return "turns", f"{state.turns} model calls but {replies} replies in the transcript"
    observations = state.observations
    if len(answered) != len(observations):
        return "observations", f"{len(observations)} observations but {len(answered)} tool messages in this run"
    executed = 0
    for index, observation in enumerate(observations):
        if not isinstance(observation, Observation):
            return f"observations.{index}", f"expected an Observation, got {observation!r}"
        if observation.call_id != answered[index]:
            return (
                f"observations.{index}.call_id",
                f"{observation.call_id!r} but its tool message answers {answered[index]!r}",
            )
        executed += observation.kind in ("result", "error")
    if state.tool_attempts < executed:
        return "tool_attempts", f"{state.tool_attempts} handler attempts but {executed} calls were executed"
    if state.pending:
        problem = _pending_problem(state, last_reply, set(answered[len(answered) - since_reply :]))
        if problem is not None:
            return problem
    paused = state.machine_state == "AwaitingApproval"
    if paused and (state.pause is None or not state.pending):
        return "pause", "a run awaiting approval must hold its pause and the blocked call"
    if not paused and state.pause is not None:
        return "pause", f"a pause is recorded but the run is in {state.machine_state!r}"
    if state.pause is not None and state.pause.fingerprint != call_fingerprint(state.pending[0]):
        return "pause.fingerprint", "does not match the blocked call (the call or the pause was edited)"
    return None


def _pending_problem(state: RunState, reply: dict[str, Any] | None, answered: set[Any]) -> tuple[str, str] | None:
    proposed: dict[Any, Any] = {}
    for item in (reply or {}).get("tool_calls") or ():
        if isinstance(item, dict):
            proposed[item.get("id")] = item.get("function")
    for index, call in enumerate(state.pending):  # the dotted path is spelled only when reported
        if not isinstance(call, ToolCall):
            return f"pending.{index}", f"expected a ToolCall, got {call!r}"
        function = proposed.get(call.call_id)
        if not isinstance(function, dict):
            return f"pending.{index}.call_id", f"{call.call_id!r} was not proposed by the latest reply"
        if call.call_id in answered:
            return f"pending.{index}.call_id", f"{call.call_id!r} was already answered"
        if function.get("name") != call.name:
            return f"pending.{index}.name", f"{call.name!r} but the reply proposed {function.get('name')!r}"
        if function.get("arguments") != call.raw_arguments:
            return f"pending.{index}.raw_arguments", "differs from the arguments text of the reply"
        if call.arguments is not None and not _same_arguments(call.raw_arguments, call.arguments):
            return f"pending.{index}.arguments", "differ from the arguments the reply's text holds"
    return None


def _same_arguments(raw: str | None, arguments: dict[str, Any]) -> bool:
    if raw is None or not raw.strip():
        return arguments == {} or raw is None
    try:
        parsed = _parse(raw)
    except (ValueError, RecursionError):
        return True  # text the engine could not parse either; the arguments are judged afresh anyway
    return bool(parsed == arguments) or json.dumps(parsed, sort_keys=True) == json.dumps(arguments, sort_keys=True)


# json.loads' own rules, without its per-call layers.
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _parse(text: str) -> Any:
    """``json.loads(text)``; a text that is one JSON value with nothing around it is scanned directly."""
    try:
        value, end = _scan(text, 0)
    except (StopIteration, ValueError, RecursionError):
        return json.loads(text)  # leading space, or not JSON: json.loads decides and words it
    return value if end == len(text) else json.loads(text)
