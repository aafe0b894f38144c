"""
An environment: the world a scenario runs against, with the names a spec may refer to.

Scenario specs are data; they name a gate, a model or a check, and the
environment resolves those names to code. Nothing outside these mappings
(and the registry) is ever looked up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from agent_fsm.engine import AnswerCheck, EndingRule, Gate, Model, RunResult, ToolSpec

__all__ = ["Check", "Environment"]

Check = Callable[[RunResult], bool]
"""A process or outcome check on a finished run (it may read the environment it closes over)."""


@attrs.define
class Environment:
    """
    A fresh world: tools, the effect log they write, and named gates, models and checks.

    ``effects`` is the ground truth of what happened; ``checks`` are
    predicates over a finished run (for example "exactly one refund of 4999
    cents landed") so that "answered" and "succeeded" stay separate questions.
    """

    tools: dict[str, ToolSpec]
    effects: list[Any] = attrs.field(factory=list)
    gates: dict[str, Gate] = attrs.field(factory=dict)
    models: dict[str, Callable[[], Model]] = attrs.field(factory=dict)
    checks: dict[str, Check] = attrs.field(factory=dict)
    answer_check: AnswerCheck | None = None
    system_prompt: str | None = None
    # The world's codes for the engine's stops (RunResult.code); see agent_fsm.Ending.
    endings: EndingRule | None = None
    # MCP servers a spec may use by name ([[mcp]]): each a function returning an unopened agent_fsm.mcp.MCPServer.
    mcp: dict[str, Callable[[], Any]] = attrs.field(factory=dict)
