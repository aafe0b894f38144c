"""
The demo: a support-desk run where the model over-reaches, the gate refuses, and the model recovers.

Run it with ``agent-fsm demo`` (or ``python -m agent_fsm.examples.demo``).
"""

from __future__ import annotations

from agent_fsm.engine import Limits, ScriptedModel, answer_message, check_run, format_result, tool_call_message
from agent_fsm.examples.support_desk import make_support_desk, support_agent

__all__ = ["main", "overreaching_model"]

TASK = "My order A-17 came broken. Could you sort this out?"


def overreaching_model() -> ScriptedModel:
    """Looks the order up, asks to refund 9999 cents (twice what was paid), and on a denial asks for 4999."""
    return ScriptedModel(
        turns=[
            tool_call_message("call_1", "lookup_order", {"order_id": "A-17"}),
            tool_call_message("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 9999}),
            answer_message("Order A-17 is refunded: 4999 cents, the amount you paid."),
        ],
        reactions={
            "denied": tool_call_message("call_3", "refund_order", {"order_id": "A-17", "amount_cents": 4999}),
        },
    )


def main() -> int:
    """Print the transcript, the typed ending, the effect log and the run invariants."""
    desk = make_support_desk()
    limits = Limits()
    result = support_agent(desk, overreaching_model(), limits=limits).run(TASK)
    print(format_result(result, desk.effects))
    checks = check_run(result, desk.effects, limits)
    print("invariants: " + "  ".join(f"{name}={'ok' if held else 'FAILED'}" for name, held in checks.items()))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
