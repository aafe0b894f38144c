"""
Shift planning (a cross-field rule): a shift ending after 22:00 needs a manager.

The end is ``start_hour + hours``; the shipped gate tests ``> 23``, so a shift ending at 23:00 slips through.
"""

from __future__ import annotations

from typing import Any

from agent_fsm import ToolCall, ToolSpec, Verdict
from tests.worlds._world import World, effect_recorder

LATEST_END = 22


def make_world() -> World:
    effects: list[dict[str, Any]] = []
    schema = {
        "type": "object",
        "properties": {
            "worker": {"type": "string", "pattern": "^W[0-9]{3}$"},
            "start_hour": {"type": "integer", "minimum": 0, "maximum": 23},
            "hours": {"type": "integer", "minimum": 1, "maximum": 12},
        },
        "required": ["worker", "start_hour", "hours"],
        "additionalProperties": False,
    }
    return World(
        {"plan_shift": ToolSpec("Plan a shift.", schema, effect_recorder(effects, "plan_shift"), effectful=True)},
        effects,
    )


def _end(call: ToolCall) -> int:
    assert call.arguments is not None
    return int(call.arguments["start_hour"]) + int(call.arguments["hours"])


def buggy_gate(call: ToolCall) -> Verdict:
    return Verdict.ask("late shift") if _end(call) > 23 else Verdict.allow("ends in time")


def sound_gate(call: ToolCall) -> Verdict:
    return Verdict.ask("late shift") if _end(call) > LATEST_END else Verdict.allow("ends in time")


def forbidden(call: ToolCall) -> bool:
    return _end(call) > LATEST_END
