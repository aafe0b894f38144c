"""
The scripted work every contestant does, and what is compared after a run.

The scenarios run on the support desk of ``agent_fsm.examples.support_desk``
with its ``refund_gate``, its handlers and ``agent_fsm.ScriptedModel``. A
``Job`` is one run's fresh desk and model; an ``Outcome`` is what a finished
run is compared on; ``verify`` compares two of them field by field.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agent_fsm import (
    Limits,
    ScriptedModel,
    Verdict,
    answer_message,
    estimate_tokens,
    function_declarations,
    tool_call_message,
)
from agent_fsm.examples.support_desk import SupportDesk, make_support_desk, refund_gate

SYSTEM_PROMPT = "You act only through the tools."
DECLARATIONS = function_declarations(make_support_desk().tools)
# The tool declarations are static data; a hand-written program renders them once.
DECLARATION_TOKENS = sum(estimate_tokens(d) for d in DECLARATIONS)
LATENCY = 0.005  # seconds per model call in the concurrency run


def overreach_model() -> ScriptedModel:
    """The demo's model: look up, refund 9999 (denied), refund 4999, answer."""
    return ScriptedModel(
        turns=[
            tool_call_message("call_1", "lookup_order", {"order_id": "A-17"}),
            tool_call_message("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 9999}),
            answer_message("Order A-17 is refunded: 4999 cents, the amount you paid."),
        ],
        reactions={"denied": tool_call_message("call_3", "refund_order", {"order_id": "A-17", "amount_cents": 4999})},
    )


def wanderer_model() -> ScriptedModel:
    """Looks the same order up on every turn, forever."""
    again = tool_call_message("call_w", "lookup_order", {"order_id": "A-17"})
    return ScriptedModel([again], reactions={"order_id": again})


def _parallel(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [c for m in messages for c in m["tool_calls"]]}


def parallel_model() -> ScriptedModel:
    """Three calls in one message (lookup, refund 9999 which is denied, policy), then refund 4999, then answer."""
    return ScriptedModel(
        turns=[
            _parallel(
                tool_call_message("p1", "lookup_order", {"order_id": "A-17"}),
                tool_call_message("p2", "refund_order", {"order_id": "A-17", "amount_cents": 9999}),
                tool_call_message("p3", "read_policy", {}),
            ),
            tool_call_message("p4", "refund_order", {"order_id": "A-17", "amount_cents": 4999}),
            answer_message("Refunded 4999 cents, the amount paid; more needs a manager."),
        ]
    )


def manager_gate(call: Any) -> Verdict:
    """The desk's refund gate, sending what it would deny to a human instead (the run pauses)."""
    verdict = refund_gate(call)
    return Verdict.ask(verdict.reason) if verdict.kind == "deny" else verdict


@dataclass(frozen=True)
class Scenario:
    """A scripted run: its model, budgets and gate."""

    key: str
    title: str
    model: Callable[[], ScriptedModel]
    limits: Limits
    gate: Callable[[Any], Verdict] = refund_gate


def scenarios(turns: int) -> list[Scenario]:
    """The three timed scenarios, the wanderer running ``turns`` turns."""
    return [
        Scenario("overreach", "over-reach (4 turns)", overreach_model, Limits()),
        Scenario(
            "wanderer", f"wanderer ({turns} turns)", wanderer_model, Limits(max_turns=turns, max_prompt_tokens=10**9)
        ),
        Scenario("parallel", "parallel + denial (3 turns)", parallel_model, Limits()),
    ]


PAUSED = Scenario("paused", "over-reach, paused for approval", overreach_model, Limits(), manager_gate)


class Model:
    """The scripted model behind a sync ``chat`` and an async ``achat``, with an optional latency."""

    __slots__ = ("inner", "latency")

    def __init__(self, inner: ScriptedModel, latency: float = 0.0) -> None:
        self.inner = inner
        self.latency = latency

    def chat(self, messages: Sequence[Any], tools: Sequence[Any] = ()) -> Any:
        if self.latency:
            time.sleep(self.latency)
        return self.inner.chat(messages, tools)

    async def achat(self, messages: Sequence[Any], tools: Sequence[Any] = ()) -> Any:
        if self.latency:
            await asyncio.sleep(self.latency)
        return self.inner.chat(messages, tools)


@dataclass
class Job:
    """Everything one run needs: a fresh desk (empty effect log), a fresh model, budgets and a gate."""

    model: Model
    desk: SupportDesk
    limits: Limits
    gate: Callable[[Any], Verdict]


def new_job(scenario: Scenario, latency: float = 0.0) -> Job:
    return Job(Model(scenario.model(), latency), make_support_desk(), scenario.limits, scenario.gate)


@dataclass
class Outcome:
    """What is compared across contestants: the ending, the effect log and the whole record of the run."""

    stop: str
    answer: str | None
    messages: list[dict[str, Any]]
    observations: list[tuple[str, bool, str, Any]]
    effects: list[dict[str, Any]]
    prompt_log: list[int]


class Mismatch(AssertionError):
    """A contestant did not do the same work as agent_fsm."""


def verify(reference: Outcome, outcome: Outcome, who: str, scenario: str) -> None:
    """
    Check that ``outcome`` equals agent_fsm's ``reference``, field by field.

    Raises:
        Mismatch: naming the contestant, the scenario, the field and the first difference.
    """
    for name in ("stop", "answer", "effects", "prompt_log", "observations", "messages"):
        want, got = getattr(reference, name), getattr(outcome, name)
        observations = name == "observations"
        if observations:
            want, got = [list(o) for o in want], [list(o) for o in got]
        if want == got:
            continue
        detail = f"agent_fsm {want!r}, {who} {got!r}"
        if isinstance(want, list) and isinstance(got, list):
            index = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
            detail = (
                f"lengths {len(want)} and {len(got)}; first difference at [{index}]: "
                f"agent_fsm {want[index] if index < len(want) else '(none)'!r}, "
                f"{who} {got[index] if index < len(got) else '(none)'!r}"
            )
        raise Mismatch(f"{who} differs from agent_fsm on {scenario}: {name}: {detail}")
