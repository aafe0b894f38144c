"""
Workers killed with SIGKILL mid-run: the run finishes on another worker and no refund lands twice.

Each test starts a worker process told to hang inside one step (the
refund's handler after its ledger row is written, or a model call), kills
it there, starts a second worker, and reads the ledger (a SQLite file the
refund tools write to) for duplicates.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agent_fsm import Stop
from agent_fsm.engine import OUTCOME_UNKNOWN
from tests import temporal_world as world

pytestmark = pytest.mark.temporal

ROOT = Path(__file__).resolve().parents[1]
REPORT = {"runs": 0, "kills": 0, "duplicates": 0}


@pytest.fixture(scope="module", autouse=True)
def report() -> Any:
    """What the crash tests did, checked at the end: every kill survived, no refund landed twice."""
    yield REPORT
    print(f"\ncrash tests: runs={REPORT['runs']} kills={REPORT['kills']} duplicates={REPORT['duplicates']}")
    assert REPORT["duplicates"] == 0


@pytest.fixture
def ledger_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.db"
    monkeypatch.setenv("AGENT_FSM_LEDGER", str(path))
    return path


def _worker(address: str, queue: str, tmp_path: Path, hang: str | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGENT_FSM_HANG", None)
    if hang is not None:
        env["AGENT_FSM_HANG"] = hang
        env["AGENT_FSM_HANG_MARKER"] = str(tmp_path / "hanging")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.temporal_worker", address, queue, "1"],  # a killed worker's runs move on in 1 s
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


def _wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"the worker never reached the step it was to hang in ({path.name})"
        time.sleep(0.05)


def _kill(process: subprocess.Popen[str], step: str) -> None:
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=10) == -signal.SIGKILL
    REPORT["kills"] += 1


def _crash(address: str, tmp_path: Path, agent: str, hang: str) -> tuple[str, str, Any]:
    """Start ``agent``'s run on a worker that hangs in ``hang``; kill it there; start a second worker."""
    from temporalio.client import Client

    from agent_fsm.temporal import start_run

    queue, run_id = f"crash-{uuid.uuid4().hex[:8]}", f"{agent}-{uuid.uuid4().hex[:8]}"
    first = _worker(address, queue, tmp_path, hang=hang)

    async def begin() -> None:
        await start_run(
            await Client.connect(address), agent=agent, task="A-17 came broken.", run_id=run_id, task_queue=queue
        )

    try:
        asyncio.run(asyncio.wait_for(begin(), 30))
        _wait_for(tmp_path / "hanging")
    finally:
        _kill(first, hang)
    return queue, run_id, _worker(address, queue, tmp_path)


def _rows(run_id: str) -> list[tuple[str, str, str, int]]:
    return [row for row in world.ledger() if row[1] == run_id]


def _tally(run_id: str) -> int:
    """Count the run and its duplicated refunds (rows beyond one) in the report; the rows."""
    rows = len(_rows(run_id))
    REPORT["runs"] += 1
    REPORT["duplicates"] += max(rows - 1, 0)
    return rows


def _stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.wait(timeout=30)


def test_a_refund_cut_off_by_a_dead_worker_waits_for_a_person(
    temporal_server: Any, ledger_file: Path, tmp_path: Path
) -> None:
    """Killed between the refund's intent and its result: not run again; "outcome unknown" names its key."""
    from temporalio.client import Client

    from agent_fsm.temporal import get_run

    _, run_id, second = _crash(temporal_server.address, tmp_path, "crash-refund", "refund")
    try:
        [(key, _, call_id, _)] = _rows(run_id)  # the refund happened; nobody observed it

        async def settled() -> Any:
            handle = get_run(await Client.connect(temporal_server.address), run_id)
            for _ in range(400):
                state = await handle.state()
                if state.stop is not None:  # paused or ended
                    break
                await asyncio.sleep(0.05)
            return state

        state = asyncio.run(asyncio.wait_for(settled(), 60))
        assert _tally(run_id) == 1  # duplicates: 0, whatever the run did next
        assert state.machine_state == "AwaitingApproval"
        reason = state.pause.reason

        async def decide() -> Any:
            handle = get_run(await Client.connect(temporal_server.address), run_id)
            await handle.reject(reviewer="ana", reason=f"the ledger has it under {key}")
            return await handle.result()

        result = asyncio.run(asyncio.wait_for(decide(), 60))
    finally:
        _stop(second)
    assert reason.startswith(OUTCOME_UNKNOWN) and key in reason and call_id in reason
    assert result.stop is Stop.ANSWERED and len(_rows(run_id)) == 1


def _finished(address: str, tmp_path: Path, agent: str, hang: str) -> tuple[str, Any]:
    """:func:`_crash`, then the run's result from the second worker, which is stopped after."""
    from temporalio.client import Client

    from agent_fsm.temporal import get_run

    _, run_id, second = _crash(address, tmp_path, agent, hang)

    async def finish() -> Any:
        return await get_run(await Client.connect(address), run_id).result()

    try:
        return run_id, asyncio.run(asyncio.wait_for(finish(), 60))
    finally:
        _stop(second)


def test_an_idempotent_refund_cut_off_is_retried_under_its_key(
    temporal_server: Any, ledger_file: Path, tmp_path: Path
) -> None:
    """An idempotent tool's activity is retried on the second worker, same key: the ledger still has one row."""
    run_id, result = _finished(temporal_server.address, tmp_path, "crash-refund-once", "refund_once")
    assert result.stop is Stop.ANSWERED and result.state.observations[1].ok
    assert _tally(run_id) == 1


def test_a_model_call_cut_off_is_asked_again_and_the_refund_lands_once(
    temporal_server: Any, ledger_file: Path, tmp_path: Path
) -> None:
    """Killed while the model thinks: the model activity is retried elsewhere; one turn, one refund."""
    run_id, result = _finished(temporal_server.address, tmp_path, "crash-model", "model")
    assert result.stop is Stop.ANSWERED and result.state.turns == 3
    assert [row[3] for row in _rows(run_id)] == [4999] and _tally(run_id) == 1


def test_a_nested_refund_cut_off_by_a_dead_worker_pauses_the_nested_run_and_its_parent(
    temporal_server: Any, ledger_file: Path, tmp_path: Path
) -> None:
    """Killed inside the refund desk's refund, nested in the triage run: replayed on a second worker, the nested
    run pauses "outcome unknown" and the triage run with it; a rejection is the end of it, one refund."""
    from temporalio.client import Client

    from agent_fsm.engine import blocked_call
    from agent_fsm.temporal import get_run

    _, run_id, second = _crash(temporal_server.address, tmp_path, "crash-nested", "refund")
    try:
        [(key, nested_run, call_id, _)] = [row for row in world.ledger() if row[1].startswith(f"{run_id}/")]
        assert (nested_run, call_id) == (f"{run_id}/t0", "c2")

        async def settled() -> Any:
            handle = get_run(await Client.connect(temporal_server.address), run_id)
            for _ in range(400):
                state = await handle.state()
                if state.stop is not None:
                    break
                await asyncio.sleep(0.05)
            return state

        state = asyncio.run(asyncio.wait_for(settled(), 60))
        call, path = blocked_call(state)
        nested = state.children["t0"]

        async def decide() -> Any:
            handle = get_run(await Client.connect(temporal_server.address), run_id)
            await handle.reject(reviewer="ana", reason=f"the ledger has it under {key}")
            return await handle.result()

        result = asyncio.run(asyncio.wait_for(decide(), 60))
    finally:
        _stop(second)
    REPORT["runs"] += 1
    rows = [row for row in world.ledger() if row[1] == nested_run]
    REPORT["duplicates"] += max(len(rows) - 1, 0)
    assert state.machine_state == "AwaitingApproval" and (call.name, path) == ("refund", ("t0", "c2"))
    assert nested.pause is not None and nested.pause.reason.startswith(OUTCOME_UNKNOWN) and key in nested.pause.reason
    assert result.stop is Stop.ANSWERED and result.state.children["t0"].stop is Stop.ANSWERED and len(rows) == 1
