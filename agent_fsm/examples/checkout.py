"""
A checkout desk whose tools are offered by the state of the run.

The world for tools per state (docs/context.md): a price must be quoted
before anything is paid, the payment is made at most once, and confirming
the order ends the run (``tool_ended``). The rules are declared, so the
static checker reads them, and a call the turn did not offer comes back
``invalid`` with the reason.
"""

from __future__ import annotations

from typing import Any

from agent_fsm.engine import RunResult, ToolSpec, after, at_most_once, ends_run
from agent_fsm.scenarios.environment import Environment

__all__ = ["RULES", "checkout_tools", "environment"]

RULES = (after("pay", "quote"), at_most_once("pay"), after("confirm", "pay"), ends_run("confirm"))
"""Quote before paying, pay once, confirm only once paid; confirming ends the run."""


def checkout_tools(effects: list[Any]) -> dict[str, ToolSpec]:
    """Quote, pay (an effect, written to ``effects``) and confirm."""

    def pay() -> dict[str, int]:
        effects.append({"paid": 4999})
        return {"paid": 4999}

    return {
        "quote": ToolSpec("Quote the cart's price in cents.", {}, lambda: {"cents": 4999}),
        "pay": ToolSpec("Pay the quoted price.", {}, pay, effectful=True),
        "confirm": ToolSpec("Confirm the order; this ends the checkout.", {}, lambda: {"order": "A-17"}),
    }


def environment() -> Environment:
    """The desk: its tools, the rules, and a check that exactly one payment landed."""
    effects: list[Any] = []

    def paid_once(result: RunResult) -> bool:
        return effects == [{"paid": 4999}]

    tools = checkout_tools(effects)
    return Environment(tools=tools, effects=effects, checks={"paid_once": paid_once}, tool_rules=RULES)
