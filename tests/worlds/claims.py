"""
Travel claims (a sum over line items): a claim totalling more than 750.00 needs a human.

No single line may exceed 500.00, so only a sum of lines can reach the limit;
the shipped gate compares the total with ``CLAIM_LIMIT_CENTS + 1``, so a claim
of exactly 750.01 slips through.
"""

from __future__ import annotations

from typing import Any

from agent_fsm import ToolCall, ToolSpec, Verdict
from tests.worlds._world import World, effect_recorder

CLAIM_LIMIT_CENTS = 75_000


def make_world() -> World:
    effects: list[dict[str, Any]] = []
    line = {
        "type": "object",
        "properties": {
            "label": {"type": "string", "minLength": 1, "maxLength": 20},
            "cents": {"type": "integer", "minimum": 1, "maximum": 50_000},
        },
        "required": ["label", "cents"],
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {
            "trip": {"type": "string", "pattern": "^T-[0-9]{3}$"},
            "lines": {"type": "array", "items": line, "minItems": 1, "maxItems": 6},
        },
        "required": ["trip", "lines"],
        "additionalProperties": False,
    }
    return World(
        {"submit_claim": ToolSpec("Submit a claim.", schema, effect_recorder(effects, "submit_claim"), effectful=True)},
        effects,
    )


def _total(call: ToolCall) -> int:
    assert call.arguments is not None
    return sum(int(line["cents"]) for line in call.arguments["lines"])


def buggy_gate(call: ToolCall) -> Verdict:
    return Verdict.ask("large claim") if _total(call) > CLAIM_LIMIT_CENTS + 1 else Verdict.allow("small claim")


def sound_gate(call: ToolCall) -> Verdict:
    return Verdict.ask("large claim") if _total(call) > CLAIM_LIMIT_CENTS else Verdict.allow("small claim")


def forbidden(call: ToolCall) -> bool:
    return call.arguments is not None and _total(call) > CLAIM_LIMIT_CENTS
