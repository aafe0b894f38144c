"""
The run loop's newer edges on Temporal, against a real dev server: the wrap-up (called by the turn budget and by the
money budget, its answer typed or rejected, a call proposed anyway), and repeated results ending no_progress. Each
workflow run ends exactly as the same agent's ``arun`` ends, state for state.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import attrs
import pytest

from agent_fsm import Agent, Limits, Price, Prices, Stop, ToolSpec, answer_message
from agent_fsm.engine._spending import REPEATED_RESULT, WRAP_UP
from tests import temporal_world as world
from tests.test_temporal import _same
from tests.test_wrap_up import LOOKUP, Metered, Recording

pytestmark = pytest.mark.temporal

QUEUE = f"loop-{uuid.uuid4().hex[:8]}"
TOOLS = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 12000)}


@attrs.frozen
class Balance:
    """The typed answer the typed desks must give."""

    account: str
    cents: int


def _turns(name: str, *replies: Any, **options: Any) -> Agent:
    """Three turns, the third the wrap-up (the turn budget calls it)."""
    limits = Limits(max_turns=3, wrap_up=True)
    return Agent(Recording(list(replies)), TOOLS, limits=limits, name=name, **options)


def _money(name: str, *replies: Any) -> Agent:
    """Ten output tokens at most a call, at one a token, 28 to spend: after two calls (10 spent) one more fits."""
    limits = Limits(max_turns=8, max_output_tokens=10, max_cost=Decimal(28), wrap_up=True)
    price = Prices(default=Price(input=Decimal(0), output=Decimal(1_000_000)))
    return Agent(Metered(list(replies)), TOOLS, limits=limits, prices=price, name=name)


def _wanderer() -> Agent:
    """docs/machine.md's wanderer: the same lookup after every result, never an answer."""
    model = Recording([LOOKUP], reactions={"result": LOOKUP})
    return Agent(model, TOOLS, limits=Limits(max_turns=8, repeated_results=3), name="loop-wanderer")


TYPED = '{"account": "ACME", "cents": 12000}'
AGENTS = {
    agent.name: agent
    for agent in [
        _turns("wrap-answers", LOOKUP, LOOKUP, answer_message("12000 cents")),
        _turns("wrap-proposes", LOOKUP, LOOKUP, LOOKUP),
        _turns("wrap-typed", LOOKUP, LOOKUP, answer_message(TYPED), output=Balance),
        _turns("wrap-untyped", LOOKUP, LOOKUP, answer_message("about 12000 cents"), output=Balance),
        _money("wrap-money", LOOKUP, LOOKUP, answer_message("12000 cents")),
        _money("wrap-money-proposes", LOOKUP, LOOKUP, LOOKUP),
        _wanderer(),
    ]
}


@pytest.fixture(scope="module")
def address(temporal_server: Any) -> Any:
    from agent_fsm.temporal import AgentDefinition
    from tests.temporal_server import ThreadWorker

    definitions = [AgentDefinition(agent, timeouts=world.TIMEOUTS) for agent in AGENTS.values()]
    worker = ThreadWorker(temporal_server.address, QUEUE, definitions).start()
    yield temporal_server.address
    worker.stop()


def go(work: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(work(), timeout))


def _both(address: str, name: str) -> tuple[Any, Any, list[list[str]]]:
    """The workflow's result, the in-process one under the same run id, and the tools each model activity offered."""
    from temporalio.client import Client

    from agent_fsm.temporal import start_run

    run_id = f"{name}-{uuid.uuid4().hex[:8]}"
    model = AGENTS[name].model
    model.offered.clear()  # type: ignore[attr-defined]

    async def remote() -> Any:
        client = await Client.connect(address)
        handle = await start_run(client, agent=name, task="Check the balance.", run_id=run_id, task_queue=QUEUE)
        return await handle.result()

    result = go(remote)
    offered = list(model.offered)  # type: ignore[attr-defined]
    local = go(lambda: AGENTS[name].arun("Check the balance.", run_id=run_id))
    _same(result, local)
    return result, local, offered


def test_the_turn_budget_calls_a_wrap_up_with_no_tools_and_its_answer_is_coded(address: str) -> None:
    """The third of three model activities offers no tools and carries the note; the answer ends coded wrap_up."""
    result, _, offered = _both(address, "wrap-answers")
    assert (result.stop, result.code, result.answer) == (Stop.ANSWERED, WRAP_UP, "12000 cents")
    assert offered == [["balance"], ["balance"], []]
    assert result.state.path[-2:] == ["WrappingUp", "Answered"]


def test_a_call_proposed_at_the_wrap_up_ends_step_limit_unrun(address: str) -> None:
    """The model proposes a lookup at the wrap-up: step_limit, the call answered as not run (no third activity)."""
    result, _, _ = _both(address, "wrap-proposes")
    assert (result.stop, result.code) == (Stop.STEP_LIMIT, "step_limit") and result.state.tool_attempts == 2
    assert [o.kind for o in result.state.observations] == ["result", "result", "denied"]


def test_a_typed_wrap_up_answer_is_the_typed_output_and_an_untyped_one_is_rejected(address: str) -> None:
    """At the wrap-up the answer must still be the output type: valid, it is the output; invalid, answer_rejected."""
    typed, _, _ = _both(address, "wrap-typed")
    assert (typed.stop, typed.code, typed.state.output) == (Stop.ANSWERED, WRAP_UP, {"account": "ACME", "cents": 12000})
    untyped, _, _ = _both(address, "wrap-untyped")
    assert (untyped.stop, untyped.code) == (Stop.ANSWER_REJECTED, "output_invalid") and untyped.state.output is None
    assert untyped.state.path[-2:] == ["WrappingUp", "AnswerRejected"]


def test_the_money_budget_calls_the_wrap_up_and_a_call_then_ends_cost_limit(address: str) -> None:
    """Usage travels through the model activity: the money left calls the wrap-up; a call proposed there ends it."""
    answered, _, offered = _both(address, "wrap-money")
    assert (answered.stop, answered.code) == (Stop.ANSWERED, WRAP_UP) and offered == [["balance"], ["balance"], []]
    assert answered.usage.cost == 15
    proposed, _, _ = _both(address, "wrap-money-proposes")
    assert (proposed.stop, proposed.code, proposed.state.tool_attempts) == (Stop.COST_LIMIT, "cost_limit", 2)


def test_the_wanderer_ends_no_progress_on_a_workflow(address: str) -> None:
    """Three identical lookups with identical results end no_progress, repeated_result, the counts in the state."""
    result, _, _ = _both(address, "loop-wanderer")
    assert (result.stop, result.code) == (Stop.NO_PROGRESS, REPEATED_RESULT)
    assert result.state.turns == 3 and list(result.state.repeats.values()) == [3]
