"""
The support desk kept in a store: refunds above 5000 cents wait for a person, and each refund is a line in a file.

The agents for ``agent-fsm runs approve|reject|recover --world
agent_fsm.examples.durable:world`` (or ``:direct_world``). Refunds go to ``refunds.jsonl`` (or
``$AGENT_FSM_REFUNDS``), one line per refund with its idempotency key, so
any process can see what was paid. Start a run from the command line::

    python -m agent_fsm.examples.durable start ticket-1 --store sqlite:///runs.db
    python -m agent_fsm.examples.durable crash ticket-2 --store sqlite:///runs.db

``start`` meets the over-reaching model (9999 cents asked: the run pauses);
``crash`` meets one that refunds 4999 cents at once, and kills its own
process with SIGKILL inside the refund handler, after the refund is written
and before its result is committed: the case recovery exists for.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path
from typing import Any

from agent_fsm import Agent
from agent_fsm.engine import ScriptedModel, ToolCall, ToolContext, ToolSpec, Verdict, answer_message, tool_call_message
from agent_fsm.examples.demo import TASK, overreaching_model
from agent_fsm.examples.support_desk import SYSTEM_PROMPT, make_support_desk
from agent_fsm.store import open_store

__all__ = ["direct_world", "refunds", "world"]

APPROVAL_ABOVE_CENTS = 5000


def _ledger() -> Path:
    return Path(os.environ.get("AGENT_FSM_REFUNDS", "refunds.jsonl"))


def refunds() -> list[dict[str, Any]]:
    """Every refund written so far (what really happened, whatever a transcript says)."""
    path = _ledger()
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _gate(call: ToolCall) -> Verdict:
    if call.name == "refund_order" and (call.arguments or {}).get("amount_cents", 0) > APPROVAL_ABOVE_CENTS:
        return Verdict.ask(f"refunds above {APPROVAL_ABOVE_CENTS} cents need a person's approval")
    return Verdict.allow("within policy")


def _tools(*, crash: bool) -> dict[str, ToolSpec]:
    tools = dict(make_support_desk().tools)

    def refund_order(order_id: str, amount_cents: int, context: ToolContext) -> dict[str, Any]:
        receipt = {"order_id": order_id, "refunded_cents": amount_cents, "key": context.idempotency_key}
        with _ledger().open("a", encoding="utf-8") as file:
            file.write(json.dumps(receipt) + "\n")
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)  # the refund is written; its result never committed
        return receipt

    spec = tools["refund_order"]
    tools["refund_order"] = ToolSpec(spec.description, spec.schema, refund_order, effectful=True)
    return tools


def world() -> Agent:
    """The desk with the over-reaching model (asks 9999 cents, then 4999 if refused), its tools and gate."""
    return Agent(overreaching_model(), _tools(crash=False), gate=_gate, system_prompt=SYSTEM_PROMPT)


def direct_world(*, crash: bool = False) -> Agent:
    """The desk with a model that refunds 4999 cents straight away (``crash``: this process dies inside that refund)."""
    model = ScriptedModel(
        [
            tool_call_message("call_1", "lookup_order", {"order_id": "A-17"}),
            tool_call_message("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 4999}),
            answer_message("Order A-17 is refunded: 4999 cents."),
        ]
    )
    return Agent(model, _tools(crash=crash), gate=_gate, system_prompt=SYSTEM_PROMPT)


def main(argv: list[str] | None = None) -> int:
    """``start`` or ``crash`` one run under a run id in a store; print how it rests."""
    parser = argparse.ArgumentParser(description="Start a support-desk run kept in a store.")
    parser.add_argument("action", choices=["start", "crash"])
    parser.add_argument("run_id")
    parser.add_argument("--store", required=True, help="sqlite:///PATH or postgresql://...")
    args = parser.parse_args(argv)
    agent = world() if args.action == "start" else direct_world(crash=True)
    with open_store(args.store) as store:
        result = agent.run(TASK, store=store, run_id=args.run_id)
    print(f"{args.run_id}: {result.stop.value}" + (f" ({result.reason})" if result.reason else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
