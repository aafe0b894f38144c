"""
agent_fsm.temporal against a real Temporal server: endings, approvals by update, races, long runs, versions.

Every run here is also run in-process with ``arun`` under the same run id;
the workflow's result must be the very same (stop, answer, reason, code
and the whole state, compared as strict JSON).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agent_fsm import RunState, Stop
from tests import temporal_world as world

pytestmark = pytest.mark.temporal

QUEUE = f"tests-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def ledger_file(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = tmp_path_factory.mktemp("ledger") / "ledger.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENT_FSM_LEDGER", str(path))
        yield path


@pytest.fixture(scope="module")
def address(temporal_server: Any, ledger_file: Any) -> Any:
    from tests.temporal_server import ThreadWorker

    worker = ThreadWorker(temporal_server.address, QUEUE, world.AGENTS.values()).start()
    yield temporal_server.address
    worker.stop()


def go(work: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(work(), timeout))


async def _client(address: str) -> Any:
    from temporalio.client import Client

    return await Client.connect(address)


async def _paused(handle: Any) -> Any:
    for _ in range(200):
        state = await handle.state()
        if state.machine_state == "AwaitingApproval":
            return state
        await asyncio.sleep(0.05)
    raise AssertionError(f"the run never paused: {state.path}")


def _in_process(name: str, run_id: str) -> Any:
    """The same agent's run in this process, under the same run id."""
    return go(lambda: world.agent_of(name).arun("My order A-17 came broken.", run_id=run_id))


def _same(remote: Any, local: Any) -> None:
    assert (remote.stop, remote.answer, remote.reason, remote.code) == (
        local.stop,
        local.answer,
        local.reason,
        local.code,
    )
    assert world.without_nonces(remote.state.to_json()) == world.without_nonces(local.state.to_json())
    assert remote.blocked_on == local.blocked_on


ENDINGS = [
    ("answers", Stop.ANSWERED),
    ("prompted", Stop.ANSWERED),
    ("parallel", Stop.ANSWERED),
    ("step-limit", Stop.STEP_LIMIT),
    ("token-limit", Stop.TOKEN_LIMIT),
    ("no-progress", Stop.NO_PROGRESS),
    ("tool-limit", Stop.TOOL_LIMIT),
    ("handoff", Stop.HANDOFF),
    ("provider-error", Stop.PROVIDER_ERROR),
    ("answer-rejected", Stop.ANSWER_REJECTED),
    ("wrap-up", Stop.ANSWERED),
    ("wrap-up-tokens", Stop.TOKEN_LIMIT),
]


@pytest.mark.parametrize(("name", "stop"), ENDINGS)
def test_each_typed_ending_is_the_in_process_one(address: str, name: str, stop: Stop) -> None:
    """A workflow run ends where ``arun`` ends, with an identical result and state."""
    from agent_fsm.temporal import start_run

    run_id = f"{name}-{uuid.uuid4().hex[:8]}"

    async def remote() -> Any:
        handle = await start_run(
            await _client(address), agent=name, task="My order A-17 came broken.", run_id=run_id, task_queue=QUEUE
        )
        return await handle.result()

    result = go(remote)
    assert result.stop is stop
    _same(result, _in_process(name, run_id))


def test_a_handler_bug_fails_the_run_as_it_raises_in_process(address: str) -> None:
    """A handler's unexpected exception is not retried: the workflow fails with HandlerError, as arun raises it."""
    from temporalio.client import WorkflowFailureError

    from agent_fsm import HandlerError
    from agent_fsm.temporal import start_run

    run_id = f"bug-{uuid.uuid4().hex[:8]}"

    async def remote() -> Any:
        handle = await start_run(await _client(address), agent="bug", task="Go.", run_id=run_id, task_queue=QUEUE)
        return await handle.result()

    with pytest.raises(WorkflowFailureError) as failed:
        go(remote)
    cause = failed.value.cause
    assert cause.type == "HandlerError" and "a bug in the handler" in cause.message
    assert RunState.from_json(cause.details[0]).pending[0].name == "explode"  # the run's state, for a person
    with pytest.raises(HandlerError, match="a bug in the handler"):
        _in_process("bug", run_id)


def _start_paused(address: str, name: str = "pause", **options: Any) -> tuple[str, Any]:
    from agent_fsm.temporal import start_run

    run_id = f"{name}-{uuid.uuid4().hex[:8]}"

    async def start() -> Any:
        handle = await start_run(
            await _client(address),
            agent=name,
            task="My order A-17 came broken.",
            run_id=run_id,
            task_queue=QUEUE,
            **options,
        )
        return await _paused(handle)

    return run_id, go(start)


def _refunds(run_id: str) -> list[int]:
    return [cents for _, rid, _, cents in world.ledger() if rid == run_id]


@pytest.mark.parametrize("agent", ["pause", "pause-io-gate"])
def test_a_pause_is_approved_by_an_update_from_another_client(address: str, agent: str) -> None:
    """The reviewer's process knows only the run id; its approval resumes the run, which pays once."""
    from agent_fsm.temporal import get_run

    run_id, paused = _start_paused(address, agent)
    assert paused.pause_id == f"{run_id}.1" and paused.pending[0].arguments == {"order_id": "A-17", "cents": 9999}
    assert _refunds(run_id) == []

    async def review() -> Any:
        handle = get_run(await _client(address), run_id)  # a connection of its own
        assert await handle.approve(reviewer="ana") == paused.pause_id
        return await handle.result(), await handle.decisions()

    result, decisions = go(review)
    assert result.stop is Stop.ANSWERED and _refunds(run_id) == [9999]
    assert [(d["decision"], d["reviewer"], d["pause_id"]) for d in decisions] == [("approve", "ana", paused.pause_id)]
    local = _in_process(agent, run_id)  # the same agent (an I/O gate is the same gate, run as an activity)
    resumed = go(lambda: world.agent_of(agent).aresume(local.state, approve=True))
    _same(result, resumed)


def test_an_edited_approval_is_judged_and_a_bad_edit_decides_nothing(address: str) -> None:
    """An edit breaking the contract is refused by the validator; the pause stays open for a good one."""
    from agent_fsm.temporal import DecisionRefused, get_run

    run_id, paused = _start_paused(address)

    async def review() -> Any:
        handle = get_run(await _client(address), run_id)
        with pytest.raises(DecisionRefused, match="invalid") as refused:
            await handle.approve(reviewer="ana", arguments={"order_id": "A-17", "cents": "lots"})
        assert refused.value.kind == "BadDecision"
        assert (await handle.state()).pause_id == paused.pause_id  # still open
        await handle.approve(reviewer="ana", arguments={"order_id": "A-17", "cents": 4999})
        return await handle.result()

    result = go(review)
    assert result.stop is Stop.ANSWERED and _refunds(run_id) == [4999]


def test_a_rejected_pause_runs_nothing_and_the_model_reads_why(address: str) -> None:
    """A rejection is a denied observation carrying the reviewer's reason; no refund lands."""
    from agent_fsm.temporal import get_run

    run_id, _ = _start_paused(address)

    async def review() -> Any:
        handle = get_run(await _client(address), run_id)
        await handle.reject(reviewer="bo", reason="too much")
        return await handle.result()

    result = go(review)
    assert result.stop is Stop.ANSWERED and _refunds(run_id) == []
    assert result.state.observations[-1].kind == "denied" and "too much" in result.state.observations[-1].content


def test_of_two_racing_approvals_exactly_one_wins(address: str) -> None:
    """Two reviewers on two connections approve the same pause at once: one is taken, one refused, one refund."""
    from agent_fsm.temporal import AlreadyDecided, get_run

    run_id, paused = _start_paused(address)

    async def race() -> Any:
        handles = [get_run(await _client(address), run_id) for _ in range(2)]
        outcomes = await asyncio.gather(
            *(h.approve(reviewer=who, pause_id=paused.pause_id) for h, who in zip(handles, ["ana", "bo"])),
            return_exceptions=True,
        )
        return outcomes, await handles[0].result(), await handles[0].decisions()

    outcomes, result, decisions = go(race)
    assert sorted(type(o).__name__ for o in outcomes) == ["AlreadyDecided", "str"]
    assert all(isinstance(o, str | AlreadyDecided) for o in outcomes)
    assert result.stop is Stop.ANSWERED and _refunds(run_id) == [9999] and len(decisions) == 1


def test_a_decision_on_another_pause_or_a_running_run_is_refused(address: str) -> None:
    """Only a run paused on that very pause id takes a decision; an ended run takes none."""
    from agent_fsm.temporal import AlreadyDecided, DecisionRefused, get_run

    run_id, paused = _start_paused(address)

    async def review() -> Any:
        handle = get_run(await _client(address), run_id)
        with pytest.raises(AlreadyDecided):
            await handle.approve(reviewer="ana", pause_id=f"{run_id}.7")
        with pytest.raises(DecisionRefused, match="reviewer"):
            await handle.approve(reviewer="", pause_id=paused.pause_id)
        await handle.reject(reviewer="ana", pause_id=paused.pause_id)
        await handle.result()
        with pytest.raises(AlreadyDecided):
            await handle.approve(reviewer="bo", pause_id=paused.pause_id)
        with pytest.raises(DecisionRefused) as late:
            await handle.approve(reviewer="bo", pause_id=f"{run_id}.2")
        return late.value.kind

    assert go(review) == "NotPaused"
    assert _refunds(run_id) == []


def _runs_of(address: str, run_id: str) -> int:
    """How many workflow runs the run's chain has (continue-as-new starts a new one)."""

    async def count() -> int:
        client = await _client(address)
        found = [e async for e in client.list_workflows(f"WorkflowId = '{run_id}'")]
        return len(found)

    return int(go(count))


def test_a_long_run_continues_as_new_and_ends_as_in_process(address: str) -> None:
    """Past its history bound the run continues as new, carrying its state losslessly; the ending is unchanged."""
    from agent_fsm.temporal import start_run

    run_id = f"long-{uuid.uuid4().hex[:8]}"

    async def remote() -> Any:
        handle = await start_run(
            await _client(address),
            agent="long",
            task="My order A-17 came broken.",
            run_id=run_id,
            task_queue=QUEUE,
            history_bound=40,
        )
        return await handle.result()

    result = go(remote)
    assert result.stop is Stop.ANSWERED and result.state.turns == 13
    _same(result, _in_process("long", run_id))
    assert _runs_of(address, run_id) >= 3


def test_a_paused_run_continues_as_new_and_is_still_decided_once(address: str) -> None:
    """A pause carried into a new workflow run keeps its id, and the approval there resumes it."""
    from agent_fsm.temporal import get_run

    run_id, paused = _start_paused(address, history_bound=5)

    async def review() -> Any:
        handle = get_run(await _client(address), run_id)
        await handle.approve(reviewer="ana", pause_id=paused.pause_id)
        return await handle.result(), await handle.decisions()

    result, decisions = go(review)
    assert result.stop is Stop.ANSWERED and _refunds(run_id) == [9999] and len(decisions) == 1
    assert _runs_of(address, run_id) >= 2


def test_a_state_exported_from_a_workflow_draws_its_trace(address: str, tmp_path: Any) -> None:
    """``agent-fsm diagram --trace`` reads the state a query returned, saved as JSON."""
    _, paused = _start_paused(address)
    saved = tmp_path / "run.json"
    saved.write_text(paused.to_json(), encoding="utf-8")
    drawn = subprocess.run(
        [sys.executable, "-m", "agent_fsm.cli", "diagram", "--trace", str(saved)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "AwaitingApproval" in drawn.stdout and "Proposing" in drawn.stdout
