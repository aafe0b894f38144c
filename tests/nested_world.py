"""
A small world of nested agents: triage delegates to refunds, whose big refunds wait for a person.

Triage may also hand billing questions over; ``recursive_agent`` is a pair that may ask each other.

Used by the tests of how nested runs are seen: diagrams, viewer, spans and ``--follow``.
"""

from __future__ import annotations

from typing import Any

from agent_fsm import Agent, Limits, ScriptedModel, ToolCall, ToolSpec, Verdict, answer_message, tool_call_message

BIG_REFUND = 5000  # cents: above this a person decides


def refund(order: str, cents: int) -> dict[str, Any]:
    """The effect: issue a refund (nothing leaves the process)."""
    return {"refunded": cents, "order": order}


def refund_gate(call: ToolCall) -> Verdict:
    """Refunds up to ``BIG_REFUND`` go through; bigger ones wait for a person."""
    if call.name == "refund" and call.arguments["cents"] > BIG_REFUND:
        return Verdict.ask("a refund above 50 dollars needs a person")
    return Verdict.allow()


def refunds_agent(cents: int = 9000) -> Agent:
    """Refunds an order, then says so."""
    script = [
        tool_call_message("r1", "refund", {"order": "A1", "cents": cents}),
        answer_message(f"refunded {cents}"),
    ]
    tools = {"refund": ToolSpec("Refund an order", {"order": str, "cents": int}, refund, effectful=True)}
    return Agent(ScriptedModel(script), tools, gate=refund_gate, name="refunds", limits=Limits(max_turns=4))


def triage_agent(cents: int = 9000) -> Agent:
    """Delegates the refund to the refunds agent, then answers."""
    refunds = refunds_agent(cents)
    billing = Agent(ScriptedModel([answer_message("billing: your invoice is fine")]), {}, name="billing")
    script = [
        tool_call_message("t1", "refunds", {"task": "refund order A1, 90 dollars"}),
        answer_message("done: refunded"),
    ]
    tools = {"refunds": refunds.as_tool(), "to_billing": billing.handoff()}
    gate = lambda call: Verdict.allow()  # the refunds agent's own gate judges the refund
    return Agent(ScriptedModel(script), tools, gate=gate, name="triage", limits=Limits(max_turns=6))


def world() -> Agent:
    """The triage world, for ``--world tests.nested_world:world``."""
    return triage_agent()


def recursive_agent() -> Agent:
    """An agent that may ask itself (through a helper that may ask it back): drawn once, with edges back."""
    helper = Agent(ScriptedModel([answer_message("helped")]), {}, name="helper")
    planner = Agent(ScriptedModel([answer_message("planned")]), {"helper": helper.as_tool()}, name="planner")
    helper.tools["planner"] = planner.as_tool()  # type: ignore[index]
    return planner


def desk_agent(cents: int = 9000) -> Agent:
    """One level more: a desk that asks triage, which asks refunds (the refund waits two levels down)."""
    triage = triage_agent(cents)
    script = [
        tool_call_message("d1", "triage", {"task": "customer wants a refund for A1"}),
        answer_message("the desk is done"),
    ]
    tools = {"triage": triage.as_tool()}
    gate = lambda call: Verdict.allow()  # the agents below judge their own calls
    return Agent(ScriptedModel(script), tools, gate=gate, name="desk", limits=Limits(max_turns=10))
