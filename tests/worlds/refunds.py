"""
Refunds in a currency (an optional field): refunds above 500 in euros need a human; euros are the default.

The shipped gate reads ``currency`` only when it is given, so a large refund without a currency slips through.
"""

from __future__ import annotations

from typing import Any

from agent_fsm import ToolCall, ToolSpec, Verdict
from tests.worlds._world import World, effect_recorder

LIMIT = 500


def make_world() -> World:
    effects: list[dict[str, Any]] = []
    schema = {
        "type": "object",
        "properties": {
            "order": {"type": "string", "pattern": "^O-[0-9]{1,6}$"},
            "amount": {"type": "integer", "minimum": 1, "maximum": 5000},
            "currency": {"type": "string", "enum": ["EUR", "GBP", "CHF"]},
        },
        "required": ["order", "amount"],
        "additionalProperties": False,
    }
    return World(
        {"refund": ToolSpec("Refund an order.", schema, effect_recorder(effects, "refund"), effectful=True)}, effects
    )


def buggy_gate(call: ToolCall) -> Verdict:
    assert call.arguments is not None
    if call.arguments.get("currency") == "EUR" and call.arguments["amount"] > LIMIT:
        return Verdict.ask("large refund")
    return Verdict.allow("small refund")


def sound_gate(call: ToolCall) -> Verdict:
    assert call.arguments is not None
    if call.arguments.get("currency", "EUR") == "EUR" and call.arguments["amount"] > LIMIT:
        return Verdict.ask("large refund")
    return Verdict.allow("small refund")


def forbidden(call: ToolCall) -> bool:
    args = call.arguments or {}
    return args.get("currency", "EUR") == "EUR" and args.get("amount", 0) > LIMIT
