"""
Human-readable views of a run: the transcript, one line per message or call.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from agent_fsm.engine.state import RunResult

__all__ = ["format_result", "format_transcript"]

_LABELS = {"system": "system", "user": "user", "assistant": "model", "tool": "tool"}


def format_transcript(messages: Iterable[Mapping[str, Any]]) -> str:
    """The transcript as aligned lines: ``role | text`` and ``model | -> tool {arguments}``."""
    lines = []
    for message in messages:
        label = f"{_LABELS.get(message.get('role', ''), str(message.get('role')))[:6]:6} |"
        content = message.get("content")
        if message.get("role") == "assistant":
            if content:
                lines.append(f"{label} {content}")
            for item in message.get("tool_calls") or ():
                function = item.get("function", {})
                lines.append(f"{label} -> {function.get('name')} {function.get('arguments')}  [{item.get('id')}]")
        else:
            lines.append(f"{label} {content if isinstance(content, str) else json.dumps(content)}")
    return "\n".join(lines)


def format_result(result: RunResult, effects: Iterable[Any] | None = None) -> str:
    """Transcript, typed ending, counters and (when given) the effect log."""
    state = result.state
    lines = [format_transcript(state.messages), ""]
    lines.append(
        f"stop={result.stop.value}  turns={state.turns}  tool_attempts={state.tool_attempts}"
        f"  observations={len(state.observations)}"
    )
    if result.code != result.stop.value:
        lines.append(f"code: {result.code}")
    if result.answer is not None:
        lines.append(f"answer: {result.answer}")
    if result.blocked_on is not None:
        lines.append(f"blocked on: {result.blocked_on.name} {json.dumps(result.blocked_on.arguments)}")
    if state.fault is not None:
        lines.append(f"provider fault: {state.fault.type} ({state.fault.kind}): {state.fault.message}")
    if effects is not None:
        lines.append(f"effect log: {json.dumps(list(effects))}")
    return "\n".join(lines)
