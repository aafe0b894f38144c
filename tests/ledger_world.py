"""
A world for durable-run tests: invoices to pay (not idempotent), receipts to send (idempotent), a ledger on disk.

Every effect is one line appended to a ledger file, tagged with the run, the
tool and the idempotency key it ran under; a line marked ``start`` is
written before the effect and the effect's own line after it, so a process
killed in between leaves the evidence. The model reads its next step off the
transcript (like ScriptedModel), so a fresh one in another process carries on.
Used by tests/test_store*.py and bench/crash_harness.py.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from agent_fsm import Agent, Gate, ToolContext, ToolSpec, Verdict, answer_message, tool_call_message
from agent_fsm.engine import ToolCall

__all__ = ["LedgerModel", "ledger_agent", "ledger_tools", "pay_gate", "read_ledger", "task_for"]


def task_for(invoices: list[str]) -> str:
    return "Pay and send a receipt for: " + " ".join(invoices)


def _append(path: Path, entry: dict[str, Any]) -> None:
    # One write() of one line on an O_APPEND file: lines from many processes never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)


def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def ledger_tools(path: Path, *, die: str | None = None, token: str = "") -> dict[str, ToolSpec]:
    """
    The world's tools writing to the ledger at ``path``.

    ``die`` kills this very process with SIGKILL inside a handler, for the
    crash tests: ``"before:pay"`` after the intent is committed but before the
    effect, ``"after:pay"`` after the effect but before the observation is
    committed (and the same for ``send_receipt``). The kill happens once per
    ``token`` (a marker line in the ledger records it), so recovery runs unhindered.
    """

    def maybe_die(moment: str, tool: str, context: ToolContext) -> None:
        if die != f"{moment}:{tool}":
            return
        if any(e["event"] == "killed" and e["token"] == token for e in read_ledger(path)):
            return
        _append(
            path, {"event": "killed", "token": token, "moment": moment, "tool": tool, "key": context.idempotency_key}
        )
        os.kill(os.getpid(), signal.SIGKILL)

    def effect(tool: str, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        base = {"tool": tool, "run": context.run_id, "call": context.call_id, "key": context.idempotency_key}
        _append(path, {"event": "start", **base, "args": arguments})
        maybe_die("before", tool, context)
        _append(path, {"event": "effect", **base, "args": arguments})
        maybe_die("after", tool, context)
        return {"done": tool, **arguments}

    def lookup(invoice: str) -> dict[str, Any]:
        return {"invoice": invoice, "cents": 100 + sum(map(ord, invoice)) % 900}

    def pay(invoice: str, cents: int, context: ToolContext) -> dict[str, Any]:
        return effect("pay", {"invoice": invoice, "cents": cents}, context)

    def send_receipt(invoice: str, context: ToolContext) -> dict[str, Any]:
        return effect("send_receipt", {"invoice": invoice}, context)

    return {
        "lookup": ToolSpec("Look an invoice up.", {"invoice": str}, lookup),
        "pay": ToolSpec("Pay an invoice; money moves.", {"invoice": str, "cents": int}, pay, effectful=True),
        "send_receipt": ToolSpec(
            "Send the receipt of a paid invoice (safe to repeat under one key).",
            {"invoice": str},
            send_receipt,
            effectful=True,
            idempotent=True,
        ),
    }


def pay_gate(call: ToolCall) -> Verdict:
    """Lookups and receipts run; payments run up to 900 cents; an invoice named ``BIG-*`` needs a person."""
    if call.name == "pay" and str((call.arguments or {}).get("invoice", "")).startswith("BIG"):
        return Verdict.ask("large invoices need a person's approval")
    return Verdict.allow("within policy")


class LedgerModel:
    """Looks each invoice of the task up, pays it, sends its receipt; then answers. Stateless: reads the transcript."""

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        task = next(m["content"] for m in messages if m.get("role") == "user")
        invoices = task.split(": ", 1)[1].split()
        done = sum(1 for m in messages if m.get("role") == "tool")
        invoice, step = divmod(done, 3)
        if invoice >= len(invoices):
            return answer_message(f"Handled {len(invoices)} invoices.")
        name = invoices[invoice]
        call_id = f"c{done}"
        if step == 0:
            return tool_call_message(call_id, "lookup", {"invoice": name})
        if step == 1:
            return tool_call_message(call_id, "pay", {"invoice": name, "cents": 100 + sum(map(ord, name)) % 900})
        return tool_call_message(call_id, "send_receipt", {"invoice": name})


def ledger_agent(path: Path, *, die: str | None = None, token: str = "", gate: Gate | None = pay_gate) -> Agent:
    """The world's agent: a fresh :class:`LedgerModel`, the tools writing to ``path`` (``die``, ``token``), ``gate``."""
    return Agent(LedgerModel(), ledger_tools(path, die=die, token=token), gate=gate)
