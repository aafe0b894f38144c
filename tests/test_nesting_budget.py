"""A nested run's share of its parent's tool attempts: the call that starts it is one of them."""

from __future__ import annotations

from typing import Any

from agent_fsm import Agent, Limits, ScriptedModel, Stop, ToolSpec, answer_message, check_run, tool_call_message


class _Searcher:
    """Searches for ever: only a budget ends it."""

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        turn = sum(m["role"] == "assistant" for m in messages)
        return tool_call_message(f"s{turn}", "search", {"query": f"page {turn}"})


def test_a_child_never_takes_the_parent_past_its_tool_attempts() -> None:
    """The delegating call counts before the child's share is cut, so parent and child together stay within the cap."""
    search = {"search": ToolSpec("Search.", {"query": str}, lambda query: "nothing")}
    child = Agent(_Searcher(), search, name="researcher", limits=Limits(max_turns=10))
    script = [tool_call_message("t1", "researcher", {"task": "find it"}), answer_message("not found")]
    limits = Limits(max_turns=40, max_tool_calls=3)
    parent = Agent(ScriptedModel(script), {"researcher": child.as_tool()}, name="lead", limits=limits)
    result = parent.run("go")
    assert result.stop is Stop.ANSWERED
    assert result.state.children["t1"].stop is Stop.TOOL_LIMIT
    assert result.state.children["t1"].tool_attempts == 2  # 3 attempts, one spent on the call that started it
    assert result.state.tool_attempts == 3
    assert check_run(result, [], limits)["bounded"]
