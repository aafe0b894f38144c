"""
The agents the Temporal tests run, registered by name in every worker (in-process and in subprocesses).

A refund desk whose refunds land in a SQLite ledger (``AGENT_FSM_LEDGER``):
the ledger is the ground truth that a killed worker did not pay twice.
``AGENT_FSM_HANG`` makes this process hang inside the named step ("refund",
"refund_once" or "model"), after writing a marker file, so that a test can
kill it there. Each scripted scenario is its own agent, so the workflow and
an in-process run can be compared turn for turn.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from agent_fsm import (
    Agent,
    Ending,
    Limits,
    ScriptedModel,
    ToolContext,
    ToolError,
    ToolSpec,
    Verdict,
    answer_message,
    tool_call_message,
)
from agent_fsm.temporal import AgentDefinition, Timeouts

TIMEOUTS = Timeouts(model=30, tool=30, gate=10, heartbeat=2, model_attempts=3, tool_attempts=3, retry_interval=0.2)


def ledger_path() -> Path:
    return Path(os.environ["AGENT_FSM_LEDGER"])


def _ledger() -> sqlite3.Connection:
    db = sqlite3.connect(ledger_path(), timeout=30, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS refunds (key TEXT, run_id TEXT, call_id TEXT, cents INTEGER)")
    return db


def ledger() -> list[tuple[str, str, str, int]]:
    """Every refund written, in order."""
    if not ledger_path().exists():
        return []
    with _ledger() as db:
        return list(db.execute("SELECT key, run_id, call_id, cents FROM refunds ORDER BY rowid"))


def _hang(step: str) -> None:
    if os.environ.get("AGENT_FSM_HANG") == step:
        Path(os.environ["AGENT_FSM_HANG_MARKER"]).write_text(step)
        time.sleep(3600)  # killed here


def refund(order_id: str, cents: int, context: ToolContext) -> dict[str, Any]:
    """Not idempotent: every call writes a row."""
    with _ledger() as db:
        db.execute(
            "INSERT INTO refunds VALUES (?, ?, ?, ?)", (context.idempotency_key, context.run_id, context.call_id, cents)
        )
    _hang("refund")
    return {"order_id": order_id, "refunded_cents": cents}


def refund_once(order_id: str, cents: int, context: ToolContext) -> dict[str, Any]:
    """Idempotent: a second call under the same key finds the first row and writes nothing."""
    with _ledger() as db:
        found = db.execute("SELECT 1 FROM refunds WHERE key = ?", (context.idempotency_key,)).fetchone()
        if found is None:
            db.execute(
                "INSERT INTO refunds VALUES (?, ?, ?, ?)",
                (context.idempotency_key, context.run_id, context.call_id, cents),
            )
    _hang("refund_once")
    return {"order_id": order_id, "refunded_cents": cents}


async def lookup(order_id: str) -> dict[str, Any]:  # an async handler: awaited on the worker
    if order_id == "gone":
        raise ToolError("the order was purged", permanent=True)
    if order_id == "flaky":
        raise ToolError("the order service is busy")
    return {"order_id": order_id, "paid_cents": 4999}


def explode() -> None:
    raise RuntimeError("a bug in the handler")


TOOLS = {
    "explode": ToolSpec("Has a bug.", {}, explode),
    "lookup": ToolSpec("Look an order up.", {"order_id": str}, lookup),
    "refund": ToolSpec("Refund an order. Moves money.", {"order_id": str, "cents": int}, refund, effectful=True),
    "refund_once": ToolSpec(
        "Refund an order under an idempotency key.",
        {"order_id": str, "cents": int},
        refund_once,
        effectful=True,
        idempotent=True,
    ),
}


def gate(call: Any) -> Verdict:
    if call.name.startswith("refund") and call.arguments["cents"] > 5000:
        return Verdict.ask("refunds above 5000 cents need a person")
    return Verdict.allow("within policy")


class HangingModel(ScriptedModel):
    """A scripted model that hangs on its ``at``-th call in a process told to (``AGENT_FSM_HANG=model``)."""

    blocking = True  # called in a thread, so the worker keeps heart-beating while it thinks

    def __init__(self, turns: Any, at: int) -> None:
        super().__init__(turns)
        self.at = at

    def chat(self, messages: Any, tools: Any = ()) -> Any:
        if sum(m.get("role") == "assistant" for m in messages) + 1 == self.at:
            _hang("model")
        return super().chat(messages, tools)


class DownModel:
    def chat(self, messages: Any, tools: Any = ()) -> Any:
        raise ConnectionRefusedError(111, "Connection refused")


def _look(call_id: str, order: str = "A-17") -> dict[str, Any]:
    return tool_call_message(call_id, "lookup", {"order_id": order})


def _refund(call_id: str, cents: int, tool: str = "refund") -> dict[str, Any]:
    return tool_call_message(call_id, tool, {"order_id": "A-17", "cents": cents})


SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "answers": [_look("c1"), _refund("c2", 4999), answer_message("Refunded 4999 cents.")],
    "pause": [_look("c1"), _refund("c2", 9999), answer_message("Done.")],
    "step-limit": [_look(f"c{i}") for i in range(1, 10)],
    "token-limit": [_look(f"c{i}") for i in range(1, 10)],
    "no-progress": [_refund("c1", 100, "refund_all")] * 4,
    "tool-limit": [_look("c1"), _look("c2"), _look("c3")],
    "handoff": [_look("c1", "gone")],
    "answer-rejected": [answer_message("I refunded everything, trust me.")],
    "crash-refund": [_look("c1"), _refund("c2", 4999), answer_message("Refunded.")],
    "crash-refund-once": [_look("c1"), _refund("c2", 4999, "refund_once"), answer_message("Refunded.")],
    "crash-model": [_look("c1"), _refund("c2", 4999), answer_message("Refunded.")],
    "long": [_look(f"c{i}") for i in range(1, 13)] + [answer_message("Looked twelve times.")],
    "bug": [tool_call_message("c1", "explode", {})],
    # Two effect-free lookups proposed at once, run together (the agent has parallel_calls=True).
    "parallel": [
        {**_look("c1"), "tool_calls": [*_look("c1")["tool_calls"], *_look("c2", "A-18")["tool_calls"]]},
        answer_message("Both orders were paid 4999 cents."),
    ],
    # bench/temporal_scale.py: three turns, two effect-free calls, nothing written anywhere.
    "bench": [_look("c1"), _look("c2", "A-18"), answer_message("Both orders were paid 4999 cents.")],
    # Limits(wrap_up=True): the turns' last call is the wrap-up; the prompt's growth calls one, answered by a call.
    "wrap-up": [_look("c1"), _look("c2"), answer_message("A-17 was paid 4999 cents.")],
    "wrap-up-tokens": [_look(f"c{i}") for i in range(1, 10)],
}

LIMITS = {
    "step-limit": Limits(max_turns=3),
    "token-limit": Limits(max_prompt_tokens=600),
    "tool-limit": Limits(max_tool_calls=2),
    "long": Limits(max_turns=20),
    "wrap-up": Limits(max_turns=3, wrap_up=True),
    "wrap-up-tokens": Limits(max_prompt_tokens=600, wrap_up=True),
}


def _honest(text: str, state: Any) -> Any:
    return None if "trust me" not in text else Ending("unsupported_claim", accept=False, reason="no refund observed")


def model_of(name: str) -> Any:
    if name == "provider-error":
        return DownModel()
    if name == "crash-model":
        return HangingModel(SCRIPTS[name], at=2)
    return ScriptedModel(SCRIPTS[name])


def agent(name: str) -> Agent:
    """The scripted desk ``name``, as it also runs in-process."""
    return Agent(
        model_of(name),
        TOOLS,
        gate=gate,
        limits=LIMITS.get(name),
        answer_check=_honest,
        name=name,
        parallel_calls=name == "parallel",
    )


AGENTS: dict[str, Agent | AgentDefinition] = {
    name: AgentDefinition(agent(name), timeouts=TIMEOUTS) for name in [*SCRIPTS, "provider-error"]
}
# A triage desk that runs a refund desk as its tool (served by its name along with it); the refund hangs.
_NESTED_REFUNDS = Agent(
    ScriptedModel([_look("c1"), _refund("c2", 4999), answer_message("Refunded.")]),
    TOOLS,
    gate=gate,
    name="crash-nested-refunds",
)
AGENTS["crash-nested"] = AgentDefinition(
    Agent(
        ScriptedModel([tool_call_message("t0", "refunds", {"task": "Refund A-17."}), answer_message("Handled.")]),
        {"refunds": _NESTED_REFUNDS.as_tool()},
        gate=lambda call: Verdict.allow("delegated"),
        name="crash-nested",
    ),
    timeouts=TIMEOUTS,
)
# The same desk, its gate run as an activity.
AGENTS["pause-io-gate"] = AgentDefinition(
    agent("pause").replace(name="pause-io-gate"), gate_does_io=True, timeouts=TIMEOUTS
)
# A bare Agent, served with the default settings, opening its runs with a system prompt of its own.
AGENTS["prompted"] = agent("answers").replace(system_prompt="You are the refund desk of A-shop.", name="prompted")


def agent_of(name: str) -> Agent:
    """The agent served as ``name``, to run it in-process."""
    served = AGENTS[name]
    return served if isinstance(served, Agent) else served.agent


def without_nonces(text: str) -> Any:
    """A saved state's data without its runs' nonces: two runs of the same work differ only there (and so in keys)."""

    def strip(data: Any) -> Any:
        data.pop("nonce", None)
        for child in data.get("children", {}).values():
            strip(child)
        return data

    return strip(json.loads(text))
