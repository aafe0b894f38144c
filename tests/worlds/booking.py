"""
Room booking: an effectful tool taking a date string, hours and a room.

Policy: a booking longer than 2 hours needs a human. The shipped gate asks
only above 3 hours (an off-by-one), and refuses dates that are not real
weekdays, so a violation needs a real weekday date and exactly 3 hours.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent_fsm import ToolCall, ToolSpec, Verdict
from tests.worlds._world import World, effect_recorder, lookup

MAX_HOURS_WITHOUT_APPROVAL = 2

BOOKING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
        "hours": {"type": "integer", "minimum": 1, "maximum": 8},
        "room": {"type": "string", "enum": ["atlas", "borealis", "cosmos"]},
    },
    "required": ["date", "hours", "room"],
    "additionalProperties": False,
}


def make_world(*, date_format: bool = False) -> World:
    """Rooms to look up and book; with ``date_format`` the date is declared ``format: date`` instead of a pattern."""
    effects: list[dict[str, Any]] = []
    schema = BOOKING_SCHEMA
    if date_format:
        date = {"type": "string", "format": "date"}
        schema = {**BOOKING_SCHEMA, "properties": {**BOOKING_SCHEMA["properties"], "date": date}}
    return World(
        tools={
            "list_rooms": ToolSpec("List the rooms that can be booked.", {}, lookup),
            "book_room": ToolSpec(
                "Book a room for some hours on a date.", schema, effect_recorder(effects, "book_room"), effectful=True
            ),
        },
        effects=effects,
    )


def _weekday(text: str) -> bool:
    try:
        return dt.date.fromisoformat(text).weekday() < 5
    except ValueError:
        return False


def buggy_gate(call: ToolCall) -> Verdict:
    if call.name != "book_room":
        return Verdict.allow("read-only")
    assert call.arguments is not None
    if not _weekday(call.arguments["date"]):
        return Verdict.deny("rooms are booked on real weekdays only")
    if call.arguments["hours"] > 3:
        return Verdict.ask("long bookings need a human")
    return Verdict.allow("short booking")


def sound_gate(call: ToolCall) -> Verdict:
    if call.name != "book_room":
        return Verdict.allow("read-only")
    assert call.arguments is not None
    if not _weekday(call.arguments["date"]):
        return Verdict.deny("rooms are booked on real weekdays only")
    if call.arguments["hours"] > MAX_HOURS_WITHOUT_APPROVAL:
        return Verdict.ask("long bookings need a human")
    return Verdict.allow("short booking")


def forbidden(call: ToolCall) -> bool:
    return (
        call.name == "book_room" and call.arguments is not None and call.arguments["hours"] > MAX_HOURS_WITHOUT_APPROVAL
    )
