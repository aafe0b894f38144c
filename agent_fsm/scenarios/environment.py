"""
An environment: the world a scenario runs against, with the names a spec may refer to.

Scenario specs are data; they name a gate, a model or a check, and the
environment resolves those names to code. Nothing outside these mappings
(and the registry) is ever looked up. :meth:`Environment.agent` puts the
world's parts and a chosen model and gate together as one
:class:`agent_fsm.Agent`, the value that runs and resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from agent_fsm import Agent, Limits
from agent_fsm.engine import (
    AnswerCheck,
    Compactor,
    EndingRule,
    Gate,
    Model,
    RunResult,
    Summarize,
    ToolRule,
    ToolsFor,
    ToolSpec,
)

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
    # How the world's agent keeps its context (compact=, compact_at=) and which tools each turn offers.
    compact: Compactor | Summarize | None = None
    compact_at: int | None = None
    tools_for: ToolsFor | None = None
    tool_rules: tuple[ToolRule, ...] = ()

    def agent(
        self,
        model: Model,
        *,
        gate: Gate | None = None,
        limits: Limits | None = None,
        system_prompt: str | None = None,
    ) -> Agent:
        """
        ``model`` as an agent in this world: its tools, answer check, endings and system prompt.

        ``gate`` (``None``: the engine's secure default) and ``limits``
        (``None``: the defaults) are the caller's choice, as a spec makes
        them; ``system_prompt`` replaces the world's own when given.
        """
        return Agent(
            model,
            self.tools,
            gate=gate,
            limits=limits,
            system_prompt=self.system_prompt if system_prompt is None else system_prompt,
            answer_check=self.answer_check,
            endings=self.endings,
            compact=self.compact,
            compact_at=self.compact_at,
            tools_for=self.tools_for,
            tool_rules=self.tool_rules,
        )
