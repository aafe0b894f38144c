"""Worlds for the evals' tests: the support desk with a planted regression (a stricter refund gate)."""

from __future__ import annotations

from agent_fsm.engine import ToolCall, Verdict
from agent_fsm.examples.support_desk import environment
from agent_fsm.scenarios import Environment

STRICTER_LIMIT_CENTS = 4000


def stricter_desk() -> Environment:
    """The support desk whose ``refund`` gate denies refunds above 4000 cents: A-17's 4999 no longer go through."""
    world = environment()

    def stricter(call: ToolCall) -> Verdict:
        if call.name == "refund_order" and (call.arguments or {}).get("amount_cents", 0) > STRICTER_LIMIT_CENTS:
            return Verdict.deny(f"refunds above {STRICTER_LIMIT_CENTS} cents need a manager")
        return Verdict.allow("within policy")

    world.gates = {**world.gates, "refund": stricter}
    return world
