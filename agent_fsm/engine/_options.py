"""
Which states and edges of the run machine each option of an agent brings.

Rationale: an agent with no screens, no compaction, no prices and no typed
output can never enter ``ScreeningInput``, ``Compacting``, ``CostLimit`` or
``OutputInvalid``; the guards of those edges are false for the run's whole
length. One list (:data:`RUN_OPTIONS`) says which guards each option makes
possible, and both the driver (the table a run tries, :meth:`CompiledMachine.without`)
and :meth:`agent_fsm.Agent.machine` (the table drawn, covered and proved) are
cut by it, so the drawn machine and the driven machine cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from agent_fsm.engine._limits import Limits
from agent_fsm.engine._models import FallbackModel
from agent_fsm.engine._tools import Registry, Subrun, person_tool

if TYPE_CHECKING:
    from agent_fsm.engine._agent import Agent

__all__ = ["RUN_OPTIONS", "RunOption", "ruled_out"]


@attrs.frozen
class RunOption:
    """
    One option of an agent and the guards of the run machine only it can make true.

    Without the option those guards are false for the run's whole length, so
    their edges, and the states only they reach, are not this agent's: the
    driver leaves them out of the table it tries (:meth:`CompiledMachine.without`)
    and :meth:`agent_fsm.Agent.machine` out of the declaration, from this one
    list. A new option's states and edges are one row here away.
    """

    name: str
    given_by: str  # what a user writes to take it
    guards: tuple[str, ...]
    taken: Callable[[Agent, Limits], bool] = attrs.field(repr=False)


def _capped(tools: Registry) -> bool:
    """Whether a tool of ``tools`` caps its calls (a registry that follows a changing list may bring one later)."""
    return hasattr(tools, "version") or any(spec.max_calls is not None for spec in tools.values())


def _hands_over(tools: Registry) -> bool:
    """Whether a tool of ``tools`` hands the conversation over (a changing list may bring one later)."""
    return hasattr(tools, "version") or any(
        isinstance(spec.handler, Subrun) and spec.handler.hands_over for spec in tools.values()
    )


def _asks_people(tools: Registry) -> bool:
    """Whether a person answers a tool of ``tools`` (a changing list may bring one later)."""
    return hasattr(tools, "version") or any(person_tool(spec) is not None for spec in tools.values())


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("input screen", "Agent(screen_input=...)", ("task_unscreened",), lambda a, _: a.screen_input is not None),
    RunOption("compaction", "Agent(compact=...)", ("compaction_due",), lambda a, _: a.compact is not None),
    RunOption("cost budget", "Limits(max_cost=...)", ("cost_over_budget",), lambda _, li: li.max_cost is not None),
    RunOption("time budget", "Limits(max_seconds=...)", ("time_spent",), lambda _, li: li.max_seconds is not None),
    RunOption(
        "fallback models", "FallbackModel(...)", ("can_fall_back",), lambda a, _: isinstance(a.model, FallbackModel)
    ),
    RunOption("typed output", "Agent(output=...)", ("output_retry_left",), lambda a, _: a.output is not None),
    RunOption(
        "tool budget", "Limits(max_tool_calls=...)", ("tool_budget_spent",), lambda _, li: li.max_tool_calls is not None
    ),
    RunOption("per-tool caps", "ToolSpec(max_calls=...)", ("tool_cap_reached",), lambda a, _: _capped(a.tools)),
    RunOption("handoffs", "Agent.handoff()", ("handed_over",), lambda a, _: _hands_over(a.tools)),
    RunOption(
        "tools a person answers",
        "ToolSpec.person(...)",
        ("answer_needed", "answer_given"),
        lambda a, _: _asks_people(a.tools),
    ),
    RunOption(
        "tools that end the run",
        "ends_run(...)",
        ("ended_by_tool",),
        lambda a, _: bool(a.tool_rules) and bool(a.ending_tools),
    ),
    RunOption(
        "result screen", "Agent(screen_result=...)", ("result_unscreened",), lambda a, _: a.screen_result is not None
    ),
    RunOption(
        "wrap-up",
        "Limits(wrap_up=True)",
        ("last_turn_due", "wrapped_for_cost", "wrapped_for_time", "wrapped_for_tokens"),
        lambda _, li: li.wrap_up,
    ),
    RunOption(
        "repeated results",
        "Limits(repeated_results=...)",
        ("result_repeated",),
        lambda _, li: li.repeated_results is not None,
    ),
)
"""The options of an agent that bring states and edges of the run machine, in the order the table first uses them."""


def ruled_out(agent: Agent, limits: Limits) -> frozenset[str]:
    """The guards ``agent`` under ``limits`` makes false for a run's whole length: the options it does not take."""
    never: list[str] = []
    for option in RUN_OPTIONS:  # a plain loop: this is read once per run
        if not option.taken(agent, limits):
            never += option.guards
    return frozenset(never)
