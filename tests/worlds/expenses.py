"""
Expenses (a limit read from a module dict): an expense above its currency's limit needs a human.

The limits live in a module-level dict; the shipped gate reads ``LIMITS[currency] + 1``,
so an expense of exactly one cent above the limit slips through.
"""

from __future__ import annotations

from typing import Any

from agent_fsm import ToolCall, ToolSpec, Verdict
from tests.worlds._world import World, effect_recorder

LIMITS = {"EUR": 40_000, "USD": 45_000, "GBP": 35_000}


def make_world() -> World:
    effects: list[dict[str, Any]] = []
    schema = {
        "type": "object",
        "properties": {
            "employee": {"type": "string", "pattern": "^E[0-9]{4}$"},
            "currency": {"type": "string", "enum": sorted(LIMITS)},
            "amount_cents": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
            "category": {"type": "string", "enum": ["travel", "meals", "equipment"]},
        },
        "required": ["employee", "currency", "amount_cents", "category"],
        "additionalProperties": False,
    }
    return World(
        {
            "file_expense": ToolSpec(
                "File an expense.", schema, effect_recorder(effects, "file_expense"), effectful=True
            )
        },
        effects,
    )


def _over(call: ToolCall, margin: int) -> bool:
    assert call.arguments is not None
    return int(call.arguments["amount_cents"]) > LIMITS[call.arguments["currency"]] + margin


def buggy_gate(call: ToolCall) -> Verdict:
    assert call.arguments is not None
    if call.arguments["amount_cents"] > LIMITS[call.arguments["currency"]] + 1:
        return Verdict.ask("above the currency's limit")
    return Verdict.allow("within the limit")


def sound_gate(call: ToolCall) -> Verdict:
    return Verdict.ask("above the currency's limit") if _over(call, 0) else Verdict.allow("within the limit")


def forbidden(call: ToolCall) -> bool:
    return call.arguments is not None and _over(call, 0)
