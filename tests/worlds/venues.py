"""
Event venues (a rule a gate factory closes over): a catered event for more than 12 guests needs a human.

The rules are lambdas built by a rule factory and wrapped by a gate factory, so
neither threshold appears in any gate's own code; the shipped gate's rule says
``> 13``, so a catered event for exactly 13 guests slips through.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent_fsm import ToolCall, ToolSpec, Verdict
from tests.worlds._world import World, effect_recorder

Rule = tuple[str, Callable[[Mapping[str, Any]], bool]]


def make_world() -> World:
    effects: list[dict[str, Any]] = []
    schema = {
        "type": "object",
        "properties": {
            "venue": {"type": "string", "enum": ["hall", "loft", "garden"]},
            "guests": {"type": "integer", "minimum": 1, "maximum": 400},
            "catering": {"type": "boolean"},
            "date": {"type": "string", "format": "date"},
        },
        "required": ["venue", "guests", "catering", "date"],
        "additionalProperties": False,
    }
    return World(
        {"book_event": ToolSpec("Book an event.", schema, effect_recorder(effects, "book_event"), effectful=True)},
        effects,
    )


def catered_above(limit: int) -> Callable[[Mapping[str, Any]], bool]:
    return lambda arguments: bool(arguments["catering"]) and arguments["guests"] > limit


def make_gate(*rules: Rule) -> Callable[[ToolCall], Verdict]:
    def gate(call: ToolCall) -> Verdict:
        for reason, applies in rules:
            if applies(call.arguments or {}):
                return Verdict.ask(reason)
        return Verdict.allow("within the venue's rules")

    return gate


buggy_gate = make_gate(("large catered events need a human", catered_above(13)))
sound_gate = make_gate(("large catered events need a human", catered_above(12)))
_POLICY = catered_above(12)


def forbidden(call: ToolCall) -> bool:
    return call.arguments is not None and _POLICY(call.arguments)
