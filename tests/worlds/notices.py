"""
Public notices (string lengths): a notice body longer than 280 characters needs an editor.

The shipped gate tests ``> 281``, so a body of exactly 281 characters slips through.
"""

from __future__ import annotations

from typing import Any

from agent_fsm import ToolCall, ToolSpec, Verdict
from tests.worlds._world import World, effect_recorder

LONGEST_BODY = 280


def make_world() -> World:
    effects: list[dict[str, Any]] = []
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 80},
            "body": {"type": "string", "minLength": 1, "maxLength": 2000},
        },
        "required": ["title", "body"],
        "additionalProperties": False,
    }
    return World(
        {
            "post_notice": ToolSpec(
                "Post a public notice.", schema, effect_recorder(effects, "post_notice"), effectful=True
            )
        },
        effects,
    )


def buggy_gate(call: ToolCall) -> Verdict:
    assert call.arguments is not None
    return Verdict.ask("long notice") if len(call.arguments["body"]) > 281 else Verdict.allow("short notice")


def sound_gate(call: ToolCall) -> Verdict:
    assert call.arguments is not None
    return Verdict.ask("long notice") if len(call.arguments["body"]) > LONGEST_BODY else Verdict.allow("short notice")


def forbidden(call: ToolCall) -> bool:
    return call.arguments is not None and len(call.arguments["body"]) > LONGEST_BODY
