"""
The five patterns and the plan executor compared on a single support-desk task, under one gate and one meter.

Each pattern gets its own fresh desk behind :func:`refund_gate`. A row of
the table gives the pattern's spend and says if the right outcome happened:
one refund, for the 4999 cents paid, and nothing else. The scripts below
are all the model does in each run, routes and drafts included, so anyone
can reproduce the figures; what separates the rows is the control policy.
Run it with ``agent-fsm compare``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import attrs

from agent_fsm.engine import ToolCall, answer_message
from agent_fsm.examples.demo import TASK, overreaching_model
from agent_fsm.examples.support_desk import (
    SupportDesk,
    make_support_desk,
    refund_gate,
    support_agent,
)
from agent_fsm.patterns._common import PatternResult, Plan, Results, ScriptedReplies
from agent_fsm.patterns.agent import agent
from agent_fsm.patterns.chain import chain
from agent_fsm.patterns.evaluator import evaluator
from agent_fsm.patterns.meter import Meter
from agent_fsm.patterns.parallel import parallel
from agent_fsm.patterns.plan import plan_and_execute
from agent_fsm.patterns.router import router

__all__ = ["CORRECT_EFFECTS", "Row", "compare_command", "compare_rows", "format_table"]

ORDER_ID = "A-17"
CORRECT_EFFECTS = [{"order_id": ORDER_ID, "refunded_cents": 4999}]
"""The one effect a correct handling of the task leaves in the log."""

# --- the code-owned steps and prompts ----------------------------------------


def look_up_order(results: Results) -> ToolCall:
    """Read the order the task is about."""
    return ToolCall("lookup", "lookup_order", {"order_id": ORDER_ID})


def refund_what_was_paid(results: Results) -> ToolCall:
    """Refund exactly the amount the order (looked up or fanned out) says was paid."""
    order = results.get("lookup") or results["order"]
    return ToolCall("refund", "refund_order", {"order_id": ORDER_ID, "amount_cents": order["paid_cents"]})


def read_policy(results: Results) -> ToolCall:
    """Fetch the refund rules."""
    return ToolCall("policy", "read_policy", {})


def confirm_refund(results: Results) -> str:
    """The drafting prompt: one sentence confirming the receipt."""
    return f"Write one sentence to the customer confirming this refund: {json.dumps(results['refund'])}"


def confirm_with_context(results: Results) -> str:
    """The drafting prompt after the fan-out: order, policy and receipt in view."""
    context = {"order": results["order"], "policy": results["policy"], "receipt": results["refund"]}
    return f"Write one sentence to the customer confirming this refund, given: {json.dumps(context)}"


def quote_policy(results: Results) -> str:
    """The policy branch's reply, written by code."""
    return f"Our policy: {results['policy']}"


def states_refunded_amount(draft: str, results: Results) -> str | None:
    """The acceptance criterion: the draft states the exact amount refunded."""
    amount = results["refund"]["refunded_cents"]
    return None if str(amount) in draft else f"the reply must state the exact amount refunded ({amount} cents)."


REFUND_PLAN = Plan(steps=(look_up_order, refund_what_was_paid), draft=confirm_refund)
BRANCHES = {"billing": REFUND_PLAN, "policy": Plan(steps=(read_policy,), compose=quote_policy)}
FAN_OUT = (
    ToolCall("order", "lookup_order", {"order_id": ORDER_ID}),
    ToolCall("policy", "read_policy", {}),
)
AFTER_FAN_OUT = Plan(steps=(refund_what_was_paid,), draft=confirm_with_context)

# --- the scripted model of each run --------------------------------------------


def drafter() -> ScriptedReplies:
    """Drafts the confirmation in one go."""
    return ScriptedReplies([answer_message("A-17 came broken: 4999 cents are back on your card.")])


def billing_router() -> ScriptedReplies:
    """Routes the task to billing, then drafts."""
    return ScriptedReplies([answer_message("billing"), answer_message("4999 cents for A-17 are back with you.")])


def vague_then_exact() -> ScriptedReplies:
    """A first draft without the amount (rejected by the criterion), then one with it."""
    return ScriptedReplies(
        [
            answer_message("Apologies that A-17 broke; the money will follow shortly."),
            answer_message("Apologies that A-17 broke; 4999 cents are now back on your bank card."),
        ]
    )


def stale_planner() -> ScriptedReplies:
    """Plans before looking anything up (guessing 9999 cents), then replans from the denial and the lookup."""
    guessed = [
        {"tool": "lookup_order", "arguments": {"order_id": ORDER_ID}},
        {"tool": "refund_order", "arguments": {"order_id": ORDER_ID, "amount_cents": 9999}},
    ]
    corrected = [{"tool": "refund_order", "arguments": {"order_id": ORDER_ID, "amount_cents": 4999}}]
    return ScriptedReplies([answer_message(json.dumps(guessed)), answer_message(json.dumps(corrected))])


# --- the comparison --------------------------------------------------------------


@attrs.frozen
class Row:
    """One pattern's line of the comparison."""

    pattern: str
    model_calls: int
    tool_calls: int
    prompt_tokens: int
    ending: str
    refund_landed: bool


_RUNS: dict[str, Callable[[SupportDesk, Meter], PatternResult]] = {
    "chain": lambda desk, meter: chain(REFUND_PLAN, drafter(), desk.tools, gate=refund_gate, meter=meter),
    "router": lambda desk, meter: router(TASK, BRANCHES, billing_router(), desk.tools, gate=refund_gate, meter=meter),
    "parallel": lambda desk, meter: parallel(
        FAN_OUT, AFTER_FAN_OUT, drafter(), desk.tools, gate=refund_gate, meter=meter
    ),
    "evaluator": lambda desk, meter: evaluator(
        REFUND_PLAN, states_refunded_amount, vague_then_exact(), desk.tools, gate=refund_gate, meter=meter
    ),
    "agent": lambda desk, meter: agent(TASK, support_agent(desk, overreaching_model()), meter=meter),
    "plan": lambda desk, meter: plan_and_execute(
        TASK, stale_planner(), desk.tools, gate=refund_gate, meter=meter, replans=1
    ),
}


def compare_rows() -> list[Row]:
    """Run every pattern on the task against a fresh desk and record what it spent and what landed."""
    rows = []
    for name, run_pattern in _RUNS.items():
        desk = make_support_desk()
        result = run_pattern(desk, Meter())
        spend = result.spend
        rows.append(
            Row(
                name,
                spend.model_calls,
                spend.tool_calls,
                spend.prompt_tokens,
                str(result.ending),
                desk.effects == CORRECT_EFFECTS,
            )
        )
    return rows


_HEADER = ("pattern", "model calls", "tool calls", "prompt tokens", "ending", "refund landed")


def format_table(rows: list[Row]) -> str:
    """The rows as a Markdown table (numbers right-aligned)."""
    cells = [
        [
            r.pattern,
            str(r.model_calls),
            str(r.tool_calls),
            str(r.prompt_tokens),
            r.ending,
            "yes" if r.refund_landed else "no",
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(_HEADER)]
    numeric = {1, 2, 3}

    def line(values: list[str] | tuple[str, ...]) -> str:
        return (
            "| "
            + " | ".join(
                v.rjust(w) if i in numeric else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths, strict=True))
            )
            + " |"
        )

    rule = (
        "|" + "|".join(("-" * (w + 1) + ":") if i in numeric else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|"
    )
    return "\n".join([line(_HEADER), rule, *(line(c) for c in cells)])


def compare_command() -> None:
    """Run the five workflow patterns and the plan executor on one support-desk task and print what each spent."""
    print(format_table(compare_rows()))
