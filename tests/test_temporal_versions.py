"""
Changing an agent's definition while its runs are in flight: a patch id keeps old runs on the old one.

The worker here caches no workflow, so every decision replays the run's
history from its start, as a freshly deployed worker would.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from agent_fsm import Agent, Limits, ScriptedModel, Stop, Verdict, answer_message, tool_call_message
from agent_fsm.temporal import AgentDefinition, register
from tests import temporal_world as world

pytestmark = pytest.mark.temporal

NAME = "versioned-desk"
QUEUE = f"versions-{uuid.uuid4().hex[:8]}"
V1 = AgentDefinition(world.agent("pause").replace(name=NAME), timeouts=world.TIMEOUTS)  # above 5000 cents: a person


def deny_large(call: Any) -> Verdict:
    if call.name.startswith("refund") and call.arguments["cents"] > 5000:
        return Verdict.deny("refunds above 5000 cents are no longer made")
    return Verdict.allow("within policy")


def _v2(patch: str | None) -> AgentDefinition:
    return AgentDefinition(
        V1.agent.replace(gate=deny_large), timeouts=V1.timeouts, patch=patch, before=V1 if patch else None
    )


async def _start(address: str) -> Any:
    from temporalio.client import Client

    from agent_fsm.temporal import start_run

    client = await Client.connect(address)
    handle = await start_run(
        client, agent=NAME, task="A-17 came broken.", run_id=f"v-{uuid.uuid4().hex[:8]}", task_queue=QUEUE
    )
    for _ in range(200):
        state = await handle.state()
        if state.machine_state in ("AwaitingApproval", "Answered"):
            return handle, state
        await asyncio.sleep(0.05)
    raise AssertionError("the run neither paused nor answered")


async def _replay(handle: Any) -> None:
    from temporalio.worker import Replayer

    from agent_fsm.temporal import sandbox_runner
    from agent_fsm.temporal.workflow import RunWorkflow

    replayer = Replayer(workflows=[RunWorkflow], workflow_runner=sandbox_runner(["tests"]))
    await replayer.replay_workflow(await handle.handle.fetch_history())


def test_a_patched_definition_keeps_runs_in_flight_on_the_old_one(
    temporal_server: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run paused under v1 finishes under v1 after v2 is deployed; a run begun later is v2's; replay agrees."""
    from temporalio.workflow import NondeterminismError

    from tests.temporal_server import ThreadWorker

    monkeypatch.setenv("AGENT_FSM_LEDGER", str(tmp_path / "ledger.db"))
    register(V1, replace=True)
    worker = ThreadWorker(temporal_server.address, QUEUE, [V1], max_cached_workflows=0).start()
    try:

        async def scenario() -> Any:
            old, paused = await _start(temporal_server.address)
            assert paused.machine_state == "AwaitingApproval"
            register(_v2("deny-large-refunds"), replace=True)  # the new definition is deployed
            await old.approve(reviewer="ana")
            kept = await old.result()
            new, _ = await _start(temporal_server.address)
            changed = await new.result()
            await _replay(old)
            await _replay(new)
            register(_v2(None), replace=True)  # the same change without a patch id
            with pytest.raises(NondeterminismError):
                await _replay(old)
            return old.run_id, kept, new.run_id, changed

        old_id, kept, new_id, changed = asyncio.run(asyncio.wait_for(scenario(), 90))
    finally:
        register(V1, replace=True)
        worker.stop()
    assert kept.stop is Stop.ANSWERED and [r[3] for r in world.ledger() if r[1] == old_id] == [9999]
    assert changed.stop is Stop.ANSWERED and [r[3] for r in world.ledger() if r[1] == new_id] == []
    assert "no longer made" in changed.state.observations[-1].content


def test_a_run_continued_as_new_keeps_the_definition_it_began_with(
    temporal_server: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run begun under v1 that continues as new after v2 is deployed still finishes under v1."""
    from tests.temporal_server import ThreadWorker

    name, queue = "versioned-long-desk", f"versions-long-{uuid.uuid4().hex[:8]}"
    script = [
        tool_call_message("c1", "lookup", {"order_id": "A-17"}),
        tool_call_message("c2", "refund", {"order_id": "A-17", "cents": 9999}),  # a pause, while v2 is deployed
        tool_call_message("c3", "lookup", {"order_id": "A-17"}),
        tool_call_message("c4", "lookup", {"order_id": "A-18"}),
        answer_message("Refunded, and both orders looked up."),
    ]
    v1 = AgentDefinition(Agent(ScriptedModel(script), world.TOOLS, gate=world.gate, name=name), timeouts=world.TIMEOUTS)
    v2 = AgentDefinition(v1.agent.replace(limits=Limits(max_turns=3)), patch="three-turns", before=v1)
    monkeypatch.setenv("AGENT_FSM_LEDGER", str(tmp_path / "ledger.db"))
    register(v1, replace=True)
    worker = ThreadWorker(temporal_server.address, queue, [v1], max_cached_workflows=0).start()
    try:

        async def scenario() -> Any:
            from temporalio.client import Client

            from agent_fsm.temporal import start_run

            client = await Client.connect(temporal_server.address)
            run_id = f"v-{uuid.uuid4().hex[:8]}"
            handle = await start_run(
                client, agent=name, task="A-17 came broken.", run_id=run_id, task_queue=queue, history_bound=5
            )
            while (await handle.state()).machine_state != "AwaitingApproval":
                await asyncio.sleep(0.05)
            register(v2, replace=True)  # deployed while the run waits; it continues as new after the approval
            await handle.approve(reviewer="ana")
            result = await handle.result()
            runs = [e async for e in client.list_workflows(f"WorkflowId = '{run_id}'")]
            return result, len(runs)

        result, runs = asyncio.run(asyncio.wait_for(scenario(), 90))
    finally:
        worker.stop()
    assert runs >= 3  # continued as new at the pause and after it
    assert result.stop is Stop.ANSWERED and result.state.turns == 5  # v2 would have stopped it at three turns
