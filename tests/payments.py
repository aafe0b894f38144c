"""A payments world for the trust-seam tests: one effect with a ranged contract, a gate with three answers."""

from __future__ import annotations

import copy
import json
from typing import Any

from agent_fsm import (
    RunState,
    ScriptedModel,
    ToolCall,
    ToolSpec,
    Verdict,
    answer_message,
    current_call_id,
    run,
    tool_call_message,
)
from agent_fsm.engine import call_fingerprint

PAY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "account": {"type": "string", "enum": ["ACME", "GLOBEX"]},
        "cents": {"type": "integer", "minimum": 1, "maximum": 1000},
    },
    "required": ["account", "cents"],
    "additionalProperties": False,
}


def make_payments(maximum: int = 1000) -> tuple[dict[str, ToolSpec], list[dict[str, Any]]]:
    """``balance`` reads; ``pay`` moves money and logs each payment with the id of the call that made it."""
    ledger: list[dict[str, Any]] = []

    def balance(account: str) -> int:
        return {"ACME": 500, "GLOBEX": 90}[account]

    def pay(account: str, cents: int) -> str:
        ledger.append({"call_id": current_call_id(), "account": account, "cents": cents})
        return f"paid {cents}"

    schema = copy.deepcopy(PAY_SCHEMA)
    schema["properties"]["cents"]["maximum"] = maximum
    tools = {
        "balance": ToolSpec("Read a balance.", {"account": str}, balance),
        "pay": ToolSpec("Pay an account. Moves money.", schema, pay, effectful=True),
    }
    return tools, ledger


def pay_gate(call: ToolCall) -> Verdict:
    """Reads run; payments up to 20 run, up to 100 need a human, above that are refused."""
    if call.name != "pay":
        return Verdict.allow("a read")
    cents = (call.arguments or {}).get("cents")
    if not isinstance(cents, int) or isinstance(cents, bool):
        return Verdict.deny("no amount")
    if cents <= 20:
        return Verdict.allow("small payment")
    if cents <= 100:
        return Verdict.ask(f"a payment of {cents} needs a human")
    return Verdict.deny(f"a payment of {cents} is above the limit")


def pay_call(cents: int, call_id: str = "c1", account: str = "ACME") -> dict[str, Any]:
    return tool_call_message(call_id, "pay", {"account": account, "cents": cents})


SCRIPT = [pay_call(50), answer_message("Paid.")]


def paused(cents: int = 50, **run_options: Any) -> tuple[Any, dict[str, ToolSpec], list[dict[str, Any]]]:
    """A run paused on a payment of ``cents`` that the gate asks a human about."""
    tools, ledger = make_payments()
    script = [pay_call(cents), answer_message("Paid.")]
    result = run("Pay ACME.", ScriptedModel(script), tools, gate=pay_gate, **run_options)
    assert result.stop.value == "awaiting_approval", result.reason
    return result, tools, ledger


def edit_pending_arguments(text: str, arguments: dict[str, Any], *, refingerprint: bool = True) -> str:
    """A careful forger's edit: the pending call, the reply's text and (optionally) the pause all agree."""
    data = json.loads(text)
    raw = json.dumps(arguments)
    data["pending"][0]["arguments"] = arguments
    data["pending"][0]["raw_arguments"] = raw
    for message in data["messages"]:
        for item in message.get("tool_calls") or ():
            if item["id"] == data["pending"][0]["call_id"]:
                item["function"]["arguments"] = raw
    if refingerprint:
        call = ToolCall(data["pending"][0]["call_id"], data["pending"][0]["name"], arguments, raw)
        data["pause"]["fingerprint"] = call_fingerprint(call)
    return json.dumps(data)


def loads(text: str) -> RunState:
    return RunState.from_json(text)
