"""
An archive walk: a model opens box after box, far more than one prompt can hold.

The world for compaction (docs/context.md): every box holds a page of
paper, so without compaction the run ends ``token_limit`` long before the
last box; with :func:`agent_fsm.drop_middle` the prompt keeps the system
prompt, the task and the latest turns, the transcript keeps everything,
and the walk ends ``answered``. :func:`environment` compacts,
:func:`plain_environment` does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm.engine import RunResult, ToolSpec, drop_middle, estimate_tokens, tool_call_message
from agent_fsm.scenarios.environment import Environment

__all__ = ["BOXES", "Walker", "archive_tools", "environment", "plain_environment"]

BOXES = 120
"""How many boxes the walker opens before it answers."""


class Walker:
    """Opens box 1, 2, ... ``boxes``, one per reply, then answers; the largest prompt it was sent is kept."""

    def __init__(self, boxes: int = BOXES) -> None:
        self.boxes, self.opened, self.largest = boxes, 0, 0

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        self.largest = max(self.largest, sum(estimate_tokens(m) for m in messages))
        if self.opened >= self.boxes:
            return {"role": "assistant", "content": f"All {self.opened} boxes hold paper."}
        self.opened += 1
        return tool_call_message(f"box_{self.opened}", "open_box", {"box": self.opened})


def archive_tools() -> dict[str, ToolSpec]:
    """One effect-free tool: the contents of a box, a page of paper."""
    return {"open_box": ToolSpec("Open a box and read what it holds.", {"box": int}, _open)}


def _open(box: int) -> str:
    return f"box {box}: " + "paper " * 60


def _under_budget(result: RunResult) -> bool:
    limits = result.state.limits
    return limits is not None and max(result.state.prompt_token_log) <= limits.max_prompt_tokens


def _whole(result: RunResult) -> bool:
    state = result.state
    replies = [m for m in state.messages if m["role"] == "assistant"]
    calls = sum(len(m.get("tool_calls") or ()) for m in replies)
    return len(replies) == state.turns and len(state.observations) == calls


def _compacted(result: RunResult) -> bool:
    state = result.state
    dropped = {i for c in state.compactions for i in c.dropped}
    return bool(dropped) and all(i < len(state.messages) for i in dropped)


def _environment(compact: bool) -> Environment:
    return Environment(
        tools=archive_tools(),
        models={"walker": lambda: Walker()},
        checks={"prompt_under_budget": _under_budget, "transcript_whole": _whole, "compactions_recorded": _compacted},
        compact=drop_middle(keep=3) if compact else None,
        compact_at=1500 if compact else None,
    )


def environment() -> Environment:
    """The archive, its agent compacting by ``drop_middle(keep=3)`` from 1500 tokens on."""
    return _environment(True)


def plain_environment() -> Environment:
    """The archive with no compaction: the control."""
    return _environment(False)
