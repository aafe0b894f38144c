"""
A shop for decisions beyond approve, edit and reject: a tool a person answers, a write the gate asks about.

The model reads its next step off the transcript: a task naming ``both``
proposes a write and a question in one reply (reviewed whole); any other asks
the question alone. Its answer quotes each result, so a test reads what the
person decided from the run's last message. Every write is a line in a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_fsm import Agent, ToolSpec, Verdict, answer_message, tool_call_message
from agent_fsm.engine import ToolCall

__all__ = ["SIZE", "shop_agent"]

SIZE = {
    "type": "object",
    "properties": {"size": {"enum": ["S", "M", "L"]}},
    "required": ["size"],
    "additionalProperties": False,
}
"""The result schema a person's answer must meet."""


class ShopModel:
    """Asks the size (and, for a task naming ``both``, writes in the same reply); then answers with the results."""

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        results = [m["content"] for m in messages if m.get("role") == "tool"]
        if results:
            return answer_message("Results: " + " | ".join(results))
        task = next(m["content"] for m in messages if m.get("role") == "user")
        ask = {"id": "q1", "type": "function", "function": {"name": "ask_size", "arguments": '{"question": "Size?"}'}}
        write = {"id": "w1", "type": "function", "function": {"name": "write", "arguments": json.dumps({"n": 1})}}
        if "both" in task:
            return {"role": "assistant", "content": None, "tool_calls": [write, ask]}
        return tool_call_message("q1", "ask_size", {"question": "Size?"})


def _gate(call: ToolCall) -> Verdict:
    return Verdict.ask("writes need a person") if call.name == "write" else Verdict.allow("questions go to a person")


def shop_agent(written: Path) -> Agent:
    """The shop: ``ask_size`` a person answers (:data:`SIZE`), ``write`` appending its ``n`` to ``written``."""

    def write(n: int) -> dict[str, int]:
        with written.open("a") as out:
            out.write(f"{n}\n")
        return {"written": n}

    tools = {
        "ask_size": ToolSpec.person("Ask the customer which size they want.", {"question": str}, result=SIZE),
        "write": ToolSpec("Write n.", {"n": int}, write, effectful=True),
    }
    return Agent(ShopModel(), tools, gate=_gate, name="shop")
