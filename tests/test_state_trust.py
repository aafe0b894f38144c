"""An edited saved state cannot buy back what its run spent: a tool's calls under its cap, the typed-output retries."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_fsm import Agent, Limits, RunState, ScriptedModel, StateError, ToolSpec, answer_message, ask_for_effects
from agent_fsm import tool_call_message as call

SCHEMA = {"type": "object", "properties": {"paid": {"type": "integer"}}, "required": ["paid"]}


def _agent(script: list[dict[str, Any]], **kwargs: Any) -> Agent:
    tools = {
        "lookup": ToolSpec("Look up.", {"q": str}, lambda q: f"found {q}", max_calls=2),
        "pay": ToolSpec("Pay.", {"cents": int}, lambda cents: "paid", effectful=True),
    }
    return Agent(ScriptedModel(script), tools, gate=ask_for_effects(tools), **kwargs)


def _paused_after_two_lookups() -> tuple[Agent, dict[str, Any]]:
    script = [call("c1", "lookup", {"q": "a"}), call("c2", "lookup", {"q": "b"}), call("c3", "pay", {"cents": 5})]
    agent = _agent([*script, call("c4", "lookup", {"q": "c"}), answer_message("done")])
    paused = agent.run("pay")
    assert paused.state.tool_uses == {"lookup": 2} and paused.stop.value == "awaiting_approval"
    return agent, json.loads(paused.state.to_json())


def test_a_lowered_tool_count_is_refused() -> None:
    """``tool_uses`` lowered below the calls the transcript shows executed: the saved state is inconsistent."""
    _, data = _paused_after_two_lookups()
    data["tool_uses"] = {"lookup": 1}
    with pytest.raises(ValueError, match=r"inconsistent at tool_uses\.lookup"):
        RunState.from_json(json.dumps(data))


def test_a_deleted_tool_count_is_refused_by_the_agent_whose_tool_is_capped() -> None:
    """A capped tool's count removed: the state alone cannot tell, the agent that caps the tool refuses it."""
    agent, data = _paused_after_two_lookups()
    data["tool_uses"] = {}
    state = RunState.from_json(json.dumps(data))
    with pytest.raises(StateError, match=r"tool_uses\.lookup"):
        agent.resume(state, approve=True)


def test_a_lowered_output_retry_count_is_refused() -> None:
    """``output_rejections`` lowered below the answers the transcript shows sent back: the state is inconsistent."""
    script = ["not json", call("c1", "pay", {"cents": 5})]
    agent = _agent([answer_message(script[0]), script[1]], output=SCHEMA, limits=Limits(output_retries=1))
    paused = agent.run("pay")
    assert paused.state.output_rejections == 1 and paused.stop.value == "awaiting_approval"
    data = json.loads(paused.state.to_json())
    data["output_rejections"] = 0
    with pytest.raises(ValueError, match="inconsistent at output_rejections"):
        RunState.from_json(json.dumps(data))
