"""
Meeting rooms: a booking names a date, hours, a number of rooms and attendees.

Policy: a room seats twelve, so more than twelve attendees per room is
forbidden. The shipped gate takes a fast path for short weekday bookings of
one room and compares there with thirteen (an off-by-one): a violation needs
a real weekday date, at most two hours, exactly one room and exactly thirteen
attendees at once (four conditions, none enough alone).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent_fsm import ToolCall, ToolSpec, Verdict
from tests.worlds._world import World, effect_recorder, lookup

SEATS_PER_ROOM = 12

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "date": {"type": "string", "format": "date"},
        "hours": {"type": "integer", "minimum": 1, "maximum": 10},
        "rooms": {"type": "integer", "minimum": 1, "maximum": 20},
        "attendees": {"type": "integer", "minimum": 1, "maximum": 400},
        "catering": {"type": "boolean"},
    },
    "required": ["date", "hours", "rooms", "attendees", "catering"],
    "additionalProperties": False,
}


def make_world() -> World:
    """Rooms to list and a booking tool that records each booking."""
    effects: list[dict[str, Any]] = []
    return World(
        tools={
            "list_rooms": ToolSpec("List the rooms.", {}, lookup),
            "book_meeting": ToolSpec(
                "Book rooms for a meeting.", SCHEMA, effect_recorder(effects, "book"), effectful=True
            ),
        },
        effects=effects,
    )


def _weekday(text: str) -> bool:
    return dt.date.fromisoformat(text).weekday() < 5


def buggy_gate(call: ToolCall) -> Verdict:
    if call.name != "book_meeting":
        return Verdict.allow("read-only")
    a = call.arguments or {}
    if _weekday(a["date"]) and a["hours"] <= 2 and a["rooms"] == 1:
        if a["attendees"] > 13:
            return Verdict.deny("one room seats twelve")
        return Verdict.allow("a short meeting in one room")
    if a["attendees"] > SEATS_PER_ROOM * a["rooms"]:
        return Verdict.deny("each room seats twelve")
    return Verdict.allow("fits the rooms")


def sound_gate(call: ToolCall) -> Verdict:
    if call.name != "book_meeting":
        return Verdict.allow("read-only")
    a = call.arguments or {}
    if a["attendees"] > SEATS_PER_ROOM * a["rooms"]:
        return Verdict.deny("each room seats twelve")
    return Verdict.allow("fits the rooms")


def forbidden(call: ToolCall) -> bool:
    a = call.arguments or {}
    return call.name == "book_meeting" and a["attendees"] > SEATS_PER_ROOM * a["rooms"]
