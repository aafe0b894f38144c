"""
Freight: a shipment has a pickup date, a weight, a zone, pallets and an express flag.

Policy: an express shipment over 500 kg needs a human. The shipped gate's
Friday rule for the northern zone compares with 501 (an off-by-one): a
violation needs a Friday, the north zone, express, and exactly 501 kg.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent_fsm import ToolCall, ToolSpec, Verdict
from tests.worlds._world import World, effect_recorder, lookup

EXPRESS_LIMIT_KG = 500
FRIDAY = 4

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pickup": {"type": "string", "format": "date"},
        "weight_kg": {"type": "integer", "minimum": 1, "maximum": 20_000},
        "zone": {"type": "string", "enum": ["north", "south", "east", "west", "islands"]},
        "pallets": {"type": "integer", "minimum": 1, "maximum": 40},
        "express": {"type": "boolean"},
    },
    "required": ["pickup", "weight_kg", "zone", "pallets", "express"],
    "additionalProperties": False,
}


def make_world() -> World:
    """Zones to list and a shipping tool that records each shipment."""
    effects: list[dict[str, Any]] = []
    return World(
        tools={
            "list_zones": ToolSpec("List the zones.", {}, lookup),
            "ship": ToolSpec("Ship freight.", SCHEMA, effect_recorder(effects, "ship"), effectful=True),
        },
        effects=effects,
    )


def buggy_gate(call: ToolCall) -> Verdict:
    if call.name != "ship":
        return Verdict.allow("read-only")
    a = call.arguments or {}
    friday_north = dt.date.fromisoformat(a["pickup"]).weekday() == FRIDAY and a["zone"] == "north"
    limit = 501 if friday_north else EXPRESS_LIMIT_KG
    if a["express"] and a["weight_kg"] > limit:
        return Verdict.ask("heavy express freight needs a human")
    return Verdict.allow("within the express limit")


def sound_gate(call: ToolCall) -> Verdict:
    if call.name != "ship":
        return Verdict.allow("read-only")
    a = call.arguments or {}
    if a["express"] and a["weight_kg"] > EXPRESS_LIMIT_KG:
        return Verdict.ask("heavy express freight needs a human")
    return Verdict.allow("within the express limit")


def forbidden(call: ToolCall) -> bool:
    a = call.arguments or {}
    return call.name == "ship" and a["express"] and a["weight_kg"] > EXPRESS_LIMIT_KG
