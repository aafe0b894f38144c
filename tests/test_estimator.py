"""A token estimator's count is checked wherever the engine asks for one: the opening, the tools, every message."""

from __future__ import annotations

from typing import Any

import pytest

from agent_fsm import Agent, Limits, RunError, RunState, ScriptedModel, ToolSpec, answer_message, start_state

TOOLS = {"lookup": ToolSpec("Look a word up.", {"word": str}, lambda word: word)}


def _estimator(bad: Any, where: str) -> Any:
    """Counts 1 per message, except ``bad`` for the system prompt, the tool declarations or the task."""

    def estimate(message: Any) -> Any:
        if where == "system" and message.get("role") == "system":
            return bad() if callable(bad) else bad
        if where == "declaration" and message.get("type") == "function":
            return bad() if callable(bad) else bad
        if where == "task" and message.get("role") == "user":
            return bad() if callable(bad) else bad
        return 1

    return estimate


def _boom() -> int:
    raise ZeroDivisionError("the tokenizer broke")


@pytest.mark.parametrize("where", ["system", "declaration", "task"])
@pytest.mark.parametrize(("bad", "words"), [(2.5, "whole number"), (-400_000, "whole number"), (_boom, "raised")])
def test_a_bad_count_anywhere_is_a_run_error_with_the_state(where: str, bad: Any, words: str) -> None:
    """A count that is not a whole number >= 0, or a raise, stops the run loudly with its state, before any call."""
    model = ScriptedModel([answer_message("hi")])
    agent = Agent(model, TOOLS, estimator=_estimator(bad, where), limits=Limits(max_prompt_tokens=1000))
    with pytest.raises(RunError, match=words) as raised:
        agent.run("a task")
    assert isinstance(raised.value.state, RunState)
    assert raised.value.state.turns == 0  # no model call was made on a budget it could not measure


def test_start_state_checks_the_opening_too() -> None:
    """The public start_state measures the opening with the same rule."""
    with pytest.raises(RunError, match="whole number"):
        start_state("task", estimator=_estimator(-5, "system"))
