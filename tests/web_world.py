"""
A world for the inbox's tests: the support desk's over-reaching refund, and a run full of hostile text.

One model serves both, choosing its script by the run's task, so one
inbox (one ``--world``) can decide either run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm import Agent, ScriptedModel, ToolSpec, Verdict, answer_message, tool_call_message
from agent_fsm.engine import ToolCall
from agent_fsm.examples.demo import TASK as REFUND_TASK
from agent_fsm.examples.durable import world as desk_world
from agent_fsm.store import RunStore

HOSTILE_TASK = "Pay the supplier's invoice <script>window.__pwned='task'</script>."
SCRIPT = "<script>window.__pwned='script';alert('script')</script>"
IMG = "<img src=x onerror=\"window.__pwned='img';alert('img')\">"
LINK = "<a href=\"javascript:window.__pwned='link'\">click me</a> javascript:alert('url')"
TEXTAREA = "</textarea><script>window.__pwned='textarea'</script><textarea>"
THOUGHTS = f"Paying now. {IMG} {SCRIPT}"
NOTE = f"{TEXTAREA} {SCRIPT} {IMG}"
ANSWER = f"Paid. {LINK} {IMG} </pre></div><script>window.__pwned='answer'</script>"
REASON = "payments need a person <b onmouseover=\"window.__pwned='reason'\">(bold?)</b>"
PAYLOADS = (SCRIPT, IMG, LINK, TEXTAREA, ANSWER, REASON)


def _pay(note: str, cents: int) -> dict[str, Any]:
    return {"paid_cents": cents, "note": note}


def _gate(call: ToolCall) -> Verdict:
    if call.name == "pay":
        cents = (call.arguments or {}).get("cents", 0)
        if cents > 100_000:
            return Verdict.deny("payments above 100000 cents are never made")
        return Verdict.ask(REASON) if cents > 1000 else Verdict.allow("small")
    return desk_world().gate(call)


class TaskRouter:
    """A model that plays the script written for the run's task (read from the transcript, like ScriptedModel)."""

    def __init__(self, scripts: Mapping[str, Any], delay: float = 0.0) -> None:
        self.scripts = scripts
        self.delay = delay  # seconds each reply takes, like a real model's

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        task = next(m.get("content") for m in messages if m.get("role") == "user")
        time.sleep(self.delay)
        return self.scripts[task].chat(messages, tools)


def world(delay: float = 0.0) -> Agent:
    """Both runs' model (each reply taking ``delay`` seconds), the desk's tools plus ``pay``, and a gate for both."""
    desk = desk_world()
    hostile = ScriptedModel(
        [
            {**tool_call_message("c1", "pay", {"note": NOTE, "cents": 5000}), "content": THOUGHTS},
            answer_message(ANSWER),
        ]
    )
    tools = {**desk.tools, "pay": ToolSpec("Pay an invoice.", {"note": str, "cents": int}, _pay, effectful=True)}
    model = TaskRouter({REFUND_TASK: desk.model, HOSTILE_TASK: hostile}, delay)
    return Agent(model, tools, gate=_gate)


def slow_world() -> Agent:
    """The same world with a model that takes three seconds per reply."""
    return world(delay=3.0)


def start(store: RunStore, run_id: str, task: str = REFUND_TASK) -> None:
    """Start a run of ``task`` in ``store``; it pauses on its gated call."""
    result = world().run(task, store=store, run_id=run_id)
    assert result.stop.value == "awaiting_approval", result
