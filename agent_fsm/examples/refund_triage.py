"""
A triage desk that delegates refunds to a refunds agent: two agents, one run, a person for the large refunds.

The triage agent (the spec's model) looks orders up and passes each refund
to the refunds agent, which it holds as a tool (:meth:`agent_fsm.Agent.as_tool`).
The refunds agent is a small clerk with a gate of its own: a refund up to
:data:`REFUND_LIMIT_CENTS` runs, a larger one waits for a person. Its pause
is the whole run's pause, on the call that delegated it; approving at the
top lets the refund land once, rejecting lets the clerk say so and the
triage agent answer. The delegation is effectful (the refunds agent pays
out), so the triage agent's gate must allow it, as it would a refund tool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm import Agent, Limits
from agent_fsm.engine import RunResult, ToolCall, ToolSpec, Verdict, answer_message, tool_call_message
from agent_fsm.scenarios.environment import Environment

__all__ = [
    "ORDERS",
    "REFUND_LIMIT_CENTS",
    "RefundClerk",
    "delegate_gate",
    "refund_gate",
    "environment",
    "refunds_agent",
    "triage_tools",
]

REFUND_LIMIT_CENTS = 5000
"""Refunds above this many cents wait for a person."""

ORDERS: Mapping[str, Mapping[str, Any]] = {
    "A-17": {"order_id": "A-17", "status": "damaged", "paid_cents": 4999},
    "B-42": {"order_id": "B-42", "status": "never arrived", "paid_cents": 12000},
}
"""The desk's orders: one small, one above the refund limit."""

TRIAGE_PROMPT = (
    "You triage customer requests. Look orders up; for a refund, ask the refunds agent with the order and the "
    "amount in cents, then tell the customer what it did."
)


class RefundClerk:
    """
    The refunds agent's model: refund what the task asks, then say what came of it.

    The task is the delegating call's arguments as JSON text (``order_id``,
    ``amount_cents``), already checked against the tool's schema; a task it
    cannot read gets an answer saying so, never a guessed refund.
    """

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """Propose the refund once; after its observation, answer with what it says."""
        task = next((m.get("content") for m in messages if m.get("role") == "user"), None)
        try:
            asked = json.loads(task) if isinstance(task, str) else None
        except ValueError:
            asked = None
        if not isinstance(asked, dict) or set(asked) != {"order_id", "amount_cents"}:
            return answer_message("I refund only an order id and an amount in cents; that is not what I was given.")
        replies = [m for m in messages if m.get("role") == "tool"]
        if not replies:
            return tool_call_message("refund_1", "refund_order", asked)
        seen = json.loads(str(replies[-1].get("content")))
        order, cents = asked["order_id"], asked["amount_cents"]
        if seen.get("ok"):
            return answer_message(f"Refunded {cents} cents on order {order}.")
        return answer_message(f"No refund on order {order}: {seen.get('content')}")


def refund_gate(call: ToolCall) -> Verdict:
    """The refunds agent's own gate: up to the limit runs, above it a person decides."""
    arguments = call.arguments or {}
    if call.name == "refund_order" and arguments.get("amount_cents", 0) > REFUND_LIMIT_CENTS:
        return Verdict.ask(f"a refund above {REFUND_LIMIT_CENTS} cents needs a person")
    return Verdict.allow()


def refunds_agent(effects: list[Any]) -> Agent:
    """The refunds agent: the clerk, one effectful tool writing its receipt to ``effects``, and its gate."""

    def refund_order(order_id: str, amount_cents: int) -> dict[str, Any]:
        receipt = {"order_id": order_id, "refunded_cents": amount_cents}
        effects.append(receipt)
        return receipt

    tools = {
        "refund_order": ToolSpec(
            "Refund an order, in cents.", {"order_id": str, "amount_cents": int}, refund_order, effectful=True
        )
    }
    return Agent(RefundClerk(), tools, gate=refund_gate, limits=Limits(max_turns=4), name="refunds")


def triage_tools(effects: list[Any]) -> dict[str, ToolSpec]:
    """The triage agent's tools: look an order up, and the refunds agent as a tool taking an order and an amount."""

    def lookup_order(order_id: str) -> dict[str, Any]:
        if order_id not in ORDERS:
            raise KeyError(f"no order {order_id}")
        return dict(ORDERS[order_id])

    refunds = refunds_agent(effects).as_tool(
        "Ask the refunds agent to refund an order; a large refund waits for a person.",
        schema={"order_id": str, "amount_cents": int},
    )
    return {
        "lookup_order": ToolSpec("Look an order up by its id.", {"order_id": str}, lookup_order),
        "refunds": refunds,
    }


def delegate_gate(call: ToolCall) -> Verdict:
    """
    The triage agent's gate: look-ups run; a refund is delegated only for a known order and at most what was paid.

    It judges the delegation, not the refund: whether a refund within that
    bound runs at once or waits for a person is the refunds agent's gate's call.
    """
    if call.name != "refunds":
        return Verdict.allow()
    arguments = call.arguments or {}
    order = ORDERS.get(str(arguments.get("order_id")))
    if order is None:
        return Verdict.deny(f"no order {arguments.get('order_id')!r} to refund")
    if arguments.get("amount_cents", 0) > order["paid_cents"]:
        return Verdict.deny(f"order {order['order_id']} was paid {order['paid_cents']} cents; refund at most that")
    return Verdict.allow()


def _paused_in_refunds(result: RunResult) -> bool:
    """The run waits on the refunds agent's own call, one level down, under the triage agent's delegation."""
    blocked = result.blocked_on
    path = result.blocked_path
    delegated = result.state.pending[0] if result.state.pending else None
    return (
        blocked is not None
        and blocked.name == "refund_order"
        and len(path) == 2
        and delegated is not None
        and delegated.name == "refunds"
        and path == (delegated.call_id, blocked.call_id)
    )


def environment() -> Environment:
    """
    A new triage desk for scenario specs.

    Gate: ``delegate`` (:func:`delegate_gate`; the refunds agent's own gate
    judges each refund). Checks: ``refunded_once``
    (exactly one receipt), ``paused_in_refunds`` (the run waits on the
    refunds agent's call, ``blocked_path`` leading to it) and
    ``spent_together`` (the triage run's turns include the refunds agent's).
    """
    effects: list[Any] = []

    def spent_together(result: RunResult) -> bool:
        state = result.state
        nested = sum(child.turns for child in state.children.values())
        return nested > 0 and state.turns > nested

    return Environment(
        tools=triage_tools(effects),
        effects=effects,
        gates={"delegate": delegate_gate},
        checks={
            "refunded_once": lambda result: len(effects) == 1,
            "paused_in_refunds": _paused_in_refunds,
            "spent_together": spent_together,
        },
        system_prompt=TRIAGE_PROMPT,
    )
