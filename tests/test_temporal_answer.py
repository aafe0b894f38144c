"""
A question two levels down, answered through a Temporal workflow on a real dev server: the workflow pauses on the
innermost call, a wrong answer is refused by the update's validator (nothing decided), a right one ends the run.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agent_fsm import Stop
from agent_fsm.engine import DecisionRefused, blocked_call
from tests.test_people_answer import levels

pytestmark = pytest.mark.temporal

QUEUE = f"answer-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def address(temporal_server: Any) -> Any:
    from agent_fsm.temporal import AgentDefinition
    from tests.temporal_server import ThreadWorker

    worker = ThreadWorker(temporal_server.address, QUEUE, [AgentDefinition(levels())]).start()
    yield temporal_server.address
    worker.stop()


def go(work: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(work(), timeout))


def test_a_question_two_levels_down_is_answered_by_an_update(address: str) -> None:
    """The workflow waits on the bottom agent's question; a wrong answer decides nothing; the right one ends it."""
    from temporalio.client import Client

    from agent_fsm.temporal import get_run, start_run

    run_id = f"answer-{uuid.uuid4().hex[:8]}"

    async def work() -> tuple[Any, Any, list[Any]]:
        client = await Client.connect(address)
        handle = await start_run(client, agent="answer-top", task="order", run_id=run_id, task_queue=QUEUE)
        for _ in range(300):
            paused = await handle.state()
            if paused.machine_state == "AwaitingApproval":
                break
            await asyncio.sleep(0.05)
        run = get_run(client, run_id)
        with pytest.raises(DecisionRefused) as refused:
            await run.answer(reviewer="ana", answer={"colour": "green"})
        with pytest.raises(DecisionRefused):
            await run.approve(reviewer="ana")
        assert refused.value.kind == "BadAnswer" and await run.decisions() == []
        assert await run.answer(reviewer="ana", answer={"colour": "red"}) == paused.pause_id
        return paused, await run.result(), await run.decisions()

    paused, result, decisions = go(work)
    call, path = blocked_call(paused)
    assert (call.name, path) == ("ask", ("t", "m", "q"))
    assert result.stop is Stop.ANSWERED and result.answer == "top done"
    leaf = result.state.children["t"].children["m"]
    assert leaf.observations[0].content == {"colour": "red"} and "TakingAnswer" in leaf.path
    assert [(d["decision"], d["reviewer"]) for d in decisions] == [("answer", "ana")]
