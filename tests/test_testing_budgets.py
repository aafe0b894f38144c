"""The testing kit's strategies for budgets: prices, money limits, reported usage, fallback chains, capped tools."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_fsm import Agent, FallbackModel, ModelReply, Stop, ToolSpec, allow_all, check_run
from agent_fsm.testing import (
    answer_messages,
    capped_tools,
    fallback_models,
    limits,
    prices,
    reported_replies,
)

TOOLS = {
    "read": ToolSpec("Read.", {"key": str}, lambda key: key),
    "write": ToolSpec("Write.", {"key": str}, lambda key: key, effectful=True),
}


class Replaying:
    """Plays drawn replies in order (then answers), as a provider reporting its usage would."""

    def __init__(self, replies: Sequence[ModelReply], last: ModelReply) -> None:
        self.replies, self.last = list(replies), last

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        turn = sum(m.get("role") == "assistant" for m in messages)
        return self.replies[turn] if turn < len(self.replies) else self.last


@settings(deadline=None, max_examples=60)
@given(
    chain=fallback_models(TOOLS),
    budget=limits(max_cost=(Decimal(0), Decimal("0.01")), max_turns=(1, 8)),
    table=prices(),
    tools=capped_tools(TOOLS),
)
def test_kit_strategies_drive_runs_that_keep_every_budget(
    chain: FallbackModel, budget: Any, table: Any, tools: dict[str, ToolSpec]
) -> None:
    """Any chain, money budget, price table and caps: a typed ending, the budget kept, no cap passed."""
    result = Agent(chain, tools, gate=allow_all, limits=budget, prices=table).run("go")
    assert result.stop in set(Stop)
    assert budget.max_cost is not None and result.usage.cost <= budget.max_cost
    for name, spec in tools.items():
        if spec.max_calls is not None:
            assert result.state.tool_uses.get(name, 0) <= spec.max_calls
    assert all(check_run(result, [], budget).values())


@settings(deadline=None, max_examples=40)
@given(data=st.data(), cap=st.integers(1, 50))
def test_reported_replies_stay_within_the_cap(data: st.DataObject, cap: int) -> None:
    """Drawn replies report output within the cap and cached tokens within the prompt."""
    reply = data.draw(reported_replies(answer_messages(), max_output_tokens=cap))
    assert reply.output_tokens is None or 0 <= reply.output_tokens <= cap
    assert reply.cached_tokens is None or (
        reply.prompt_tokens is not None and reply.cached_tokens <= reply.prompt_tokens
    )
    last = data.draw(reported_replies(answer_messages(), max_output_tokens=cap))
    result = Agent(Replaying([reply], last), {}).run("hi")
    assert result.stop is Stop.ANSWERED and result.usage.tokens > 0
