"""
A nested world for durable-run tests: a triage agent that delegates refunds to a refunds agent.

The refunds agent looks the order up, refunds it (money moves: effectful,
not idempotent; above 500 its gate asks a person) and notifies the
customer (effectful, idempotent). The triage agent's only tool runs the
refunds agent (``as_tool``); its gate allows the delegation. Every effect is
a line of a ledger file (``start`` before the effect, ``effect`` after it),
and a handler may SIGKILL its own process once at a chosen moment, so a
crash leaves evidence (see tests/ledger_world.py, whose pattern this follows).
Both models read their next step off the transcript, so a fresh process carries on.
Used by tests/test_store_nested.py, tests/test_store_nested_crash.py and the Temporal tests.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

from agent_fsm import Agent, ToolContext, ToolSpec, Verdict, allow_all, answer_message, tool_call_message
from agent_fsm.engine import ToolCall
from tests.ledger_world import _append, read_ledger

__all__ = [
    "BIG",
    "DeskModel",
    "desk_agent",
    "RefundsModel",
    "TriageModel",
    "effects",
    "refunds_agent",
    "refunds_gate",
    "refunds_tools",
    "triage_agent",
    "triage_task",
]

BIG = 500
"""Refunds above this many euros wait for a person."""


def triage_task(order: str, amount: int) -> str:
    return f"Customer asks for a refund of {amount} EUR on order {order}."


def effects(ledger: Path, tool: str | None = None) -> list[dict[str, Any]]:
    """The effects that took place (their ``effect`` lines), of ``tool`` or all."""
    return [e for e in read_ledger(ledger) if e["event"] == "effect" and (tool is None or e["tool"] == tool)]


def refunds_tools(ledger: Path, *, die: str | None = None, token: str = "", hang: float = 0.0) -> dict[str, ToolSpec]:
    """
    The refunds agent's tools writing to ``ledger``.

    ``die`` kills this process with SIGKILL inside a handler, once per
    ``token``: ``"before:refund"`` after the intent is committed and before
    the effect, ``"after:refund"`` after the effect and before its
    observation is committed (the same for ``notify``). With ``hang``
    seconds, the handler of the order named ``token`` sleeps that long there
    instead (once), so that a Temporal activity times out with its outcome unknown.
    """

    def maybe_die(moment: str, tool: str, arguments: dict[str, Any]) -> None:
        if die != f"{moment}:{tool}" or (hang and arguments.get("order") != token):
            return
        if any(e["event"] in ("killed", "hung") and e["token"] == token for e in read_ledger(ledger)):
            return
        if hang:
            _append(ledger, {"event": "hung", "token": token, "moment": moment, "tool": tool})
            time.sleep(hang)
            return
        _append(ledger, {"event": "killed", "token": token, "moment": moment, "tool": tool})
        os.kill(os.getpid(), signal.SIGKILL)

    def effect(tool: str, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        base = {"tool": tool, "run": context.run_id, "call": context.call_id, "key": context.idempotency_key}
        _append(ledger, {"event": "start", **base, "args": arguments})
        maybe_die("before", tool, arguments)
        _append(ledger, {"event": "effect", **base, "args": arguments})
        maybe_die("after", tool, arguments)
        return dict(sorted({"done": tool, **arguments}.items()))  # keys in order, as a Temporal activity returns them

    def lookup_order(order: str) -> dict[str, Any]:
        return {"order": order, "paid": 1000}

    def refund(order: str, amount: int, context: ToolContext) -> dict[str, Any]:
        return effect("refund", {"order": order, "amount": amount}, context)

    def notify(order: str, context: ToolContext) -> dict[str, Any]:
        return effect("notify", {"order": order}, context)

    return {
        "lookup_order": ToolSpec("Look an order up.", {"order": str}, lookup_order),
        "refund": ToolSpec("Refund an order; money moves.", {"order": str, "amount": int}, refund, effectful=True),
        "notify": ToolSpec(
            "Tell the customer the refund is on its way (safe to repeat under one key).",
            {"order": str},
            notify,
            effectful=True,
            idempotent=True,
        ),
    }


def refunds_gate(call: ToolCall) -> Verdict:
    """Lookups and notices run; refunds up to :data:`BIG` run; larger ones need a person."""
    if call.name == "refund" and int((call.arguments or {}).get("amount", 0)) > BIG:
        return Verdict.ask(f"refunds above {BIG} EUR need a person's approval")
    return Verdict.allow("within policy")


_ASKED = re.compile(r"refund of (\d+) EUR on order (\S+?)\.")


class RefundsModel:
    """Looks the order up, refunds it, notifies the customer, then answers. Stateless: reads the transcript."""

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        task = next(m["content"] for m in messages if m.get("role") == "user")
        found = _ASKED.search(task)
        assert found is not None, task
        amount, order = int(found.group(1)), found.group(2)
        done = [m for m in messages if m.get("role") == "tool"]
        if len(done) == 0:
            return tool_call_message("r0", "lookup_order", {"order": order})
        if len(done) == 1:
            return tool_call_message("r1", "refund", {"order": order, "amount": amount})
        if len(done) == 2:
            if '"ok": false' in done[1]["content"].replace('"ok":false', '"ok": false'):
                return answer_message(f"Refund of {order} not made.")
            return tool_call_message("r2", "notify", {"order": order})
        return answer_message(f"Refunded {amount} EUR on {order}.")


class TriageModel:
    """Sends the customer's request to the refunds agent, then answers with what it said. Stateless."""

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        task = next(m["content"] for m in messages if m.get("role") == "user")
        done = [m for m in messages if m.get("role") == "tool"]
        if not done:
            return tool_call_message("t0", "refunds", {"task": task})
        return answer_message(f"Triage done: {done[-1]['content']}")


def refunds_agent(ledger: Path, *, die: str | None = None, token: str = "", hang: float = 0.0) -> Agent:
    tools = refunds_tools(ledger, die=die, token=token, hang=hang)
    return Agent(RefundsModel(), tools, gate=refunds_gate, name="refunds")


def _delegate(call: ToolCall) -> Verdict:
    return Verdict.allow("refunds are delegated")


def triage_agent(ledger: Path, *, die: str | None = None, token: str = "", hang: float = 0.0) -> Agent:
    """The triage agent; its refunds tool runs :func:`refunds_agent` (``die``, ``token``, ``hang`` go to its tools)."""
    refunds = refunds_agent(ledger, die=die, token=token, hang=hang)
    return Agent(
        TriageModel(),
        {"refunds": refunds.as_tool("Hand a refund request to the refunds desk.")},
        gate=_delegate,
        name="triage",
    )


class DeskModel:
    """Sends every request to the triage agent, then answers with what came back. Stateless."""

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        task = next(m["content"] for m in messages if m.get("role") == "user")
        done = [m for m in messages if m.get("role") == "tool"]
        return tool_call_message("d0", "triage", {"task": task}) if not done else answer_message("Desk done.")


def desk_agent(ledger: Path, **crash: Any) -> Agent:
    """Two levels of nesting: a desk runs the triage agent, which runs the refunds agent."""
    return Agent(DeskModel(), {"triage": triage_agent(ledger, **crash).as_tool()}, gate=allow_all, name="desk")
