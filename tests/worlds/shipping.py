"""
Shipping orders (nested objects): an order of more than 50 units in all needs a human.

The shipped gate counts only the first line of the nested order, so a large order split over lines slips through.
"""

from __future__ import annotations

from typing import Any

from agent_fsm import ToolCall, ToolSpec, Verdict
from tests.worlds._world import World, effect_recorder

MAX_UNITS = 50


def make_world() -> World:
    effects: list[dict[str, Any]] = []
    line = {
        "type": "object",
        "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
            "units": {"type": "integer", "minimum": 1, "maximum": 40},
        },
        "required": ["sku", "units"],
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {
            "order": {
                "type": "object",
                "properties": {
                    "lines": {"type": "array", "items": line, "minItems": 1, "maxItems": 4},
                    "address": {
                        "type": "object",
                        "properties": {
                            "country": {"type": "string", "enum": ["DE", "FR", "NL"]},
                            "postcode": {"type": "string", "pattern": "^[0-9]{5}$"},
                        },
                        "required": ["country"],
                        "additionalProperties": False,
                    },
                },
                "required": ["lines", "address"],
                "additionalProperties": False,
            }
        },
        "required": ["order"],
        "additionalProperties": False,
    }
    return World(
        {"ship_order": ToolSpec("Ship an order.", schema, effect_recorder(effects, "ship_order"), effectful=True)},
        effects,
    )


def _lines(call: ToolCall) -> list[dict[str, Any]]:
    assert call.arguments is not None
    lines: list[dict[str, Any]] = call.arguments["order"]["lines"]
    return lines


def buggy_gate(call: ToolCall) -> Verdict:
    return Verdict.ask("large order") if _lines(call)[0]["units"] > MAX_UNITS else Verdict.allow("small order")


def sound_gate(call: ToolCall) -> Verdict:
    return (
        Verdict.ask("large order")
        if sum(line["units"] for line in _lines(call)) > MAX_UNITS
        else Verdict.allow("small order")
    )


def forbidden(call: ToolCall) -> bool:
    return sum(line["units"] for line in _lines(call)) > MAX_UNITS
