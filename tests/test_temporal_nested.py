"""
A run with a nested agent as a Temporal workflow on a real dev server: the nested pause, decided by an update.

The worker is given only the triage agent; the refunds agent it runs as a
tool is served with it, by its name, so the nested run's model and refund
calls are the refunds agent's activities. The workflow's result is compared
with the same run in-process, as the other Temporal tests do.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agent_fsm import Agent, Stop, allow_all, tool_call_message
from agent_fsm.engine import OUTCOME_UNKNOWN, Nested, blocked_call
from tests.nested_ledger_world import effects, refunds_agent, triage_agent, triage_task
from tests.temporal_world import without_nonces

pytestmark = pytest.mark.temporal

QUEUE = f"nested-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nested") / "ledger"


@pytest.fixture(scope="module")
def address(temporal_server: Any, ledger: Path) -> Any:
    from agent_fsm.temporal import AgentDefinition, Timeouts
    from tests.temporal_server import ThreadWorker

    # The refund of order O-9 hangs once after its effect, past the tool timeout: its outcome is unknown.
    timeouts = Timeouts(model=30, tool=2, gate=10, heartbeat=1, model_attempts=3, tool_attempts=3, retry_interval=0.2)
    triage = AgentDefinition(triage_agent(ledger, die="after:refund", token="O-9", hang=3.0), timeouts=timeouts)
    worker = ThreadWorker(temporal_server.address, QUEUE, [triage, _front_desk(triage.agent)]).start()
    yield temporal_server.address
    worker.stop()


class HandingModel:
    """Hands every conversation over to the refunds desk."""

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        return tool_call_message("h0", "refunds", {})


def _front_desk(triage: Agent) -> Agent:
    """A desk that hands the conversation to the very refunds agent the triage agent nests (one agent per name)."""
    handler = triage.tools["refunds"].handler
    assert isinstance(handler, Nested)
    return Agent(HandingModel(), {"refunds": handler.agent.handoff()}, gate=allow_all, name="front-desk")


def go(work: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(work(), timeout))


async def _client(address: str) -> Any:
    from temporalio.client import Client

    return await Client.connect(address)


def _start_paused(address: str, order: str, amount: int, **options: Any) -> tuple[str, Any]:
    from agent_fsm.temporal import start_run

    run_id = f"triage-{uuid.uuid4().hex[:8]}"

    async def start() -> Any:
        client = await _client(address)
        task = triage_task(order, amount)
        handle = await start_run(client, agent="triage", task=task, run_id=run_id, task_queue=QUEUE, **options)
        for _ in range(300):
            state = await handle.state()
            if state.machine_state == "AwaitingApproval":
                return state
            await asyncio.sleep(0.05)
        raise AssertionError(f"the run never paused: {state.path}")

    return run_id, go(start)


def _refunds(ledger: Path, run_id: str) -> list[int]:
    return [e["args"]["amount"] for e in effects(ledger, "refund") if e["run"] == f"{run_id}/t0"]


def test_the_refunds_agent_is_served_with_the_agent_that_nests_it(address: str) -> None:
    """Serving the triage agent registers the refunds agent under its own name, with the triage timeouts."""
    from agent_fsm.temporal import registered

    served = registered()
    assert served["refunds"].agent.name == "refunds" and served["refunds"].timeouts == served["triage"].timeouts


def test_a_nested_pause_pauses_the_workflow_and_an_approval_resumes_child_then_parent(
    address: str, ledger: Path
) -> None:
    """The workflow waits on the refunds agent's refund; one approval update runs it once; the run is arun's."""
    from agent_fsm.temporal import get_run

    run_id, paused = _start_paused(address, "O-1", 900)
    call, path = blocked_call(paused)
    assert (call.name, path) == ("refund", ("t0", "r1")) and paused.pause_id == f"{run_id}.1"
    assert paused.children["t0"].machine_state == "AwaitingApproval" and _refunds(ledger, run_id) == []

    async def review() -> Any:
        handle = get_run(await _client(address), run_id)
        assert await handle.approve(reviewer="ana") == paused.pause_id
        return await handle.result()

    result = go(review)
    assert result.stop is Stop.ANSWERED and "Refunded 900 EUR on O-1." in (result.answer or "")
    assert _refunds(ledger, run_id) == [900]
    assert result.state.children["t0"].machine_state == "Answered"
    # The same run in this process, decided the same way: the very same result and state.
    local_ledger = ledger.with_name("local-ledger")
    agent = triage_agent(local_ledger)
    local = go(lambda: agent.arun(triage_task("O-1", 900), run_id=run_id))
    local = go(lambda: agent.aresume(local.state, approve=True))
    assert (result.stop, result.answer, result.reason) == (local.stop, local.answer, local.reason)
    assert without_nonces(result.state.to_json()) == without_nonces(local.state.to_json())


def test_an_edit_is_judged_by_the_nested_agent_and_a_rejection_goes_down(address: str, ledger: Path) -> None:
    """An edit breaking the refunds contract decides nothing; a good edit runs; a rejection refunds nothing."""
    from agent_fsm.temporal import DecisionRefused, get_run

    edited_id, _ = _start_paused(address, "O-2", 900)
    rejected_id, _ = _start_paused(address, "O-3", 900)

    async def review() -> Any:
        client = await _client(address)
        edited, rejected = get_run(client, edited_id), get_run(client, rejected_id)
        with pytest.raises(DecisionRefused, match="invalid"):
            await edited.approve(reviewer="ana", arguments={"order": "O-2", "amount": "lots"})
        await edited.approve(reviewer="ana", arguments={"order": "O-2", "amount": 400})
        await rejected.reject(reviewer="bo", reason="too much")
        return await edited.result(), await rejected.result()

    edited, rejected = go(review)
    assert edited.stop is Stop.ANSWERED and _refunds(ledger, edited_id) == [400]
    assert rejected.stop is Stop.ANSWERED and "not made" in (rejected.answer or "")
    assert _refunds(ledger, rejected_id) == []


def test_a_nested_refund_whose_outcome_is_unknown_waits_for_a_person(address: str, ledger: Path) -> None:
    """The refund's only attempt times out after the money moved: the nested run pauses, outcome unknown, and so
    does the workflow; a person who finds the refund made rejects, and it is never run again."""
    from agent_fsm.temporal import get_run

    run_id, paused = _start_paused(address, "O-9", 300)  # small: the gate allows it, then it hangs
    call, path = blocked_call(paused)
    assert (call.name, path) == ("refund", ("t0", "r1"))
    child = paused.children["t0"]
    assert child.judgement is not None and child.judgement.reason.startswith(OUTCOME_UNKNOWN)
    assert paused.pending[0].call_id == "t0" and OUTCOME_UNKNOWN in (paused.judgement.reason or "")
    # Settled where it was interrupted, as recovery from a store settles it: the refund's step into Executing is
    # rolled back, and the triage run pauses on its delegation, never leaving it.
    assert child.path[-2:] == ["Proposing", "AwaitingApproval"]
    assert paused.path == ["Proposing", "Executing", "AwaitingApproval"]

    async def review() -> Any:
        handle = get_run(await _client(address), run_id)
        await handle.reject(reviewer="ana", reason="it was refunded")
        return await handle.result()

    result = go(review)
    assert result.stop is Stop.ANSWERED
    assert _refunds(ledger, run_id) == [300]  # the one refund made before the timeout; none after


def test_an_unnamed_nested_agent_is_refused_when_the_worker_is_made(tmp_path: Path) -> None:
    """A worker serves agents by name: one nesting an unnamed agent is refused before anything runs."""
    from agent_fsm import Agent
    from agent_fsm.temporal.definition import AgentDefinition, nested_definitions

    unnamed = refunds_agent(tmp_path / "ledger").replace(name=None)
    desk = Agent(unnamed.model, {"refunds": unnamed.as_tool()}, name="desk")
    with pytest.raises(TypeError, match="unnamed agent as its tool 'refunds'"):
        nested_definitions([AgentDefinition(desk)])
    other = refunds_agent(tmp_path / "other")
    with pytest.raises(ValueError, match="not the one served under that name"):
        nested_definitions([AgentDefinition(triage_agent(tmp_path / "ledger")), AgentDefinition(other)])


def test_a_nested_pause_carried_into_a_new_workflow_run_is_decided_there(address: str, ledger: Path) -> None:
    """Past its history bound the paused run continues as new with its nested run; the approval resumes both."""
    from agent_fsm.temporal import get_run

    run_id, paused = _start_paused(address, "O-5", 900, history_bound=5)

    async def review() -> Any:
        client = await _client(address)
        handle = get_run(client, run_id)
        await handle.approve(reviewer="ana", pause_id=paused.pause_id)
        runs = [e async for e in client.list_workflows(f"WorkflowId = '{run_id}'")]
        return await handle.result(), len(runs)

    result, runs = go(review)
    assert runs >= 2 and result.stop is Stop.ANSWERED and _refunds(ledger, run_id) == [900]


def test_a_handoff_on_temporal_ends_as_in_process(address: str, ledger: Path) -> None:
    """The front desk hands the conversation to the refunds agent: the run ends handed_over, as arun ends it."""
    from agent_fsm.temporal import start_run

    run_id = f"front-{uuid.uuid4().hex[:8]}"
    task = triage_task("O-4", 300)

    async def remote() -> Any:
        handle = await start_run(await _client(address), agent="front-desk", task=task, run_id=run_id, task_queue=QUEUE)
        return await handle.result()

    result = go(remote)
    assert result.stop is Stop.HANDED_OVER and result.answer == "Refunded 300 EUR on O-4."
    assert [e["args"]["amount"] for e in effects(ledger, "refund") if e["run"] == f"{run_id}/h0"] == [300]
    local = go(lambda: _front_desk(triage_agent(ledger.with_name("local-handoff"))).arun(task, run_id=run_id))
    assert (result.stop, result.answer, result.code) == (local.stop, local.answer, local.code)
    assert without_nonces(result.state.to_json()) == without_nonces(local.state.to_json())
