"""
Transfers: too many fields for the contract's finite part to be enumerated whole.

Policy: an account younger than 30 days may send at most 100,000 cents. The
shipped gate's rule for API transfers in CHF compares with 100,001 (an
off-by-one): a violation needs the api channel, CHF, a young account and
exactly 100,001 cents, among seven fields whose combinations pass the
enumeration's ceiling.
"""

from __future__ import annotations

from typing import Any

from agent_fsm import ToolCall, ToolSpec, Verdict
from tests.worlds._world import World, effect_recorder, lookup

YOUNG_DAYS = 30
YOUNG_LIMIT_CENTS = 100_000

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "amount_cents": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP", "CHF", "JPY", "SEK"]},
        "channel": {"type": "string", "enum": ["web", "app", "api", "branch"]},
        "account_age_days": {"type": "integer", "minimum": 0, "maximum": 3650},
        "priority": {"type": "string", "enum": ["low", "normal", "high"]},
        "fee_cents": {"type": "integer", "minimum": 0, "maximum": 5000},
        "scheduled": {"type": "boolean"},
    },
    "required": ["amount_cents", "currency", "channel", "account_age_days", "priority", "fee_cents", "scheduled"],
    "additionalProperties": False,
}


def make_world() -> World:
    """Accounts to look up and a transfer tool that records each transfer."""
    effects: list[dict[str, Any]] = []
    return World(
        tools={
            "lookup_account": ToolSpec("Look an account up.", {}, lookup),
            "send": ToolSpec("Send money.", SCHEMA, effect_recorder(effects, "send"), effectful=True),
        },
        effects=effects,
    )


def buggy_gate(call: ToolCall) -> Verdict:
    if call.name != "send":
        return Verdict.allow("read-only")
    a = call.arguments or {}
    young = a["account_age_days"] < YOUNG_DAYS
    limit = 100_001 if a["channel"] == "api" and a["currency"] == "CHF" else YOUNG_LIMIT_CENTS
    if young and a["amount_cents"] > limit:
        return Verdict.deny("young accounts send at most 100,000 cents")
    return Verdict.allow("within limits")


def sound_gate(call: ToolCall) -> Verdict:
    if call.name != "send":
        return Verdict.allow("read-only")
    a = call.arguments or {}
    if a["account_age_days"] < YOUNG_DAYS and a["amount_cents"] > YOUNG_LIMIT_CENTS:
        return Verdict.deny("young accounts send at most 100,000 cents")
    return Verdict.allow("within limits")


def forbidden(call: ToolCall) -> bool:
    a = call.arguments or {}
    return call.name == "send" and a["account_age_days"] < YOUNG_DAYS and a["amount_cents"] > YOUNG_LIMIT_CENTS
