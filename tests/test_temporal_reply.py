"""
A reply reviewed whole through a Temporal workflow on a real dev server: one ``reply`` update carries every
call's decision; a partial or wrong review is refused by the update's validator (nothing decided), at the top
and two levels down.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agent_fsm import Agent, CallDecision, ScriptedModel, Stop, allow_all, answer_message, tool_call_message
from agent_fsm.engine import AlreadyDecided, DecisionRefused, blocked_call
from tests.test_people_reply import WHOLE, make_agent, nested_desk

pytestmark = pytest.mark.temporal

QUEUE = f"reply-{uuid.uuid4().hex[:8]}"
FLAT: list[int] = []  # what the reviewed agent's writes wrote, on the worker
DEEP: list[int] = []


def _top() -> Agent:
    """A desk running the nested desk, which runs the reviewed agent: the reply waits two levels down."""
    model = ScriptedModel([tool_call_message("m", "desk", {"task": "work"}), answer_message("top done")])
    return Agent(model, {"desk": nested_desk(DEEP).as_tool()}, gate=allow_all, name="reviewed-top")


@pytest.fixture(scope="module")
def address(temporal_server: Any) -> Any:
    from agent_fsm.temporal import AgentDefinition
    from tests.temporal_server import ThreadWorker

    agents = [AgentDefinition(make_agent(FLAT)), AgentDefinition(_top())]
    worker = ThreadWorker(temporal_server.address, QUEUE, agents).start()
    yield temporal_server.address
    worker.stop()


def go(work: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(work(), timeout))


async def _paused(client: Any, agent: str) -> tuple[Any, Any]:
    from agent_fsm.temporal import start_run

    handle = await start_run(
        client, agent=agent, task="work", run_id=f"{agent}-{uuid.uuid4().hex[:8]}", task_queue=QUEUE
    )
    for _ in range(300):
        state = await handle.state()
        if state.machine_state == "AwaitingApproval":
            return handle, state
        await asyncio.sleep(0.05)
    raise AssertionError(f"the run did not pause: {state.machine_state}")


def _at(prefix: str, reply: dict[str, CallDecision]) -> dict[str, CallDecision]:
    """A review addressed from ``prefix`` (``m/t/``: the calls of a run nested two levels down)."""
    return {prefix + call_id: decision for call_id, decision in reply.items()}


async def _refusals(handle: Any, prefix: str = "") -> list[str]:
    """Each wrong review sent (its calls addressed from ``prefix``), and the kind of its refusal."""
    kinds = []
    for wrong in (
        {"w1": CallDecision.approved(), "q1": CallDecision.answered(3)},  # w2 undecided
        {**WHOLE, "r1": CallDecision.approved()},  # r1 awaits nobody
        {**WHOLE, "q1": CallDecision.answered(11)},  # out of the result schema
        {**WHOLE, "q1": CallDecision.approved()},  # a question approved without its answer
    ):
        with pytest.raises(DecisionRefused) as refused:
            await handle.review(reviewer="ana", reply=_at(prefix, wrong))
        kinds.append(refused.value.kind)
    return kinds


def test_a_reply_is_decided_whole_by_one_update(address: str) -> None:
    """Partial, extra and wrong reviews decide nothing; the whole one edits, answers and rejects in one step."""
    from temporalio.client import Client

    async def work() -> tuple[Any, list[str], Any, list[Any]]:
        client = await Client.connect(address)
        handle, paused = await _paused(client, "reviewed")
        kinds = await _refusals(handle)
        with pytest.raises(DecisionRefused) as unreadable:  # not the reply's JSON form
            await handle._decide("reply", {"reviewer": "ana", "reply": {"w1": {"maybe": 1}}})
        kinds.append(unreadable.value.kind)
        assert await handle.decisions() == [] and FLAT == []
        assert await handle.review(reviewer="ana", reply=WHOLE) == paused.pause_id
        with pytest.raises(AlreadyDecided):
            await handle.review(reviewer="bo", reply=WHOLE, pause_id=paused.pause_id)
        return paused, kinds, await handle.result(), await handle.decisions()

    paused, kinds, result, decisions = go(work)
    assert kinds == ["PartialDecision", "PartialDecision", "BadAnswer", "BadAnswer", "BadDecision"]
    assert result.stop is Stop.ANSWERED and FLAT == [5]
    kinds_seen = [(o.call_id, o.kind, o.content) for o in result.state.observations]
    assert kinds_seen[:3] == [("w1", "result", "wrote 5"), ("r1", "result", "read"), ("q1", "result", 3)]
    assert kinds_seen[3][:2] == ("w2", "denied") and "not twice" in kinds_seen[3][2]
    ((decision),) = decisions
    assert (decision["decision"], decision["reviewer"], decision["pause_id"]) == ("reply", "ana", paused.pause_id)
    assert decision["reply"] == {"w1": {"arguments": {"n": 5}}, "q1": {"answer": 3}, "w2": {"reject": "not twice"}}


def test_a_reply_two_levels_down_is_decided_whole_at_the_top(address: str) -> None:
    """The innermost run's calls, addressed from the top (``m/t/w1``): one update decides them all, judged there."""
    from temporalio.client import Client

    async def work() -> tuple[Any, list[str], Any]:
        client = await Client.connect(address)
        handle, paused = await _paused(client, "reviewed-top")
        kinds = await _refusals(handle, "m/t/")
        assert DEEP == []
        await handle.review(reviewer="ana", reply=_at("m/t/", WHOLE))
        return paused, kinds, await handle.result()

    paused, kinds, result = go(work)
    call, path = blocked_call(paused)
    assert (call.name, path) == ("write", ("m", "t", "w1"))
    assert kinds == ["PartialDecision", "PartialDecision", "BadAnswer", "BadAnswer"]
    assert result.stop is Stop.ANSWERED and result.answer == "top done" and DEEP == [5]
    leaf = result.state.children["m"].children["t"]
    assert [(o.call_id, o.kind) for o in leaf.observations] == [
        ("w1", "result"),
        ("r1", "result"),
        ("q1", "result"),
        ("w2", "denied"),
    ]
