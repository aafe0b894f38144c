"""
Background runs across processes: a serving process killed with SIGKILL mid-run has its run taken up by another.

Each process takes over the runs left ``running`` without a commit for
``--recover-after`` seconds, claimed by a compare-and-set, so one process
continues each; the ledger shows each effect done once, an idempotent one
re-run under the same key.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import httpx
import pytest

from agent_fsm.serve import CLIENTS_VARIABLE
from agent_fsm.store import SqliteStore, open_store
from tests.ledger_world import read_ledger, task_for
from tests.serve_process import serve_process

TOKEN = "ui-token-0123456789abcdef"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store on SQLite (a file) or PostgreSQL (a fresh database on a real server)."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_dsn")
        open_store(url).close()
        return url
    SqliteStore(tmp_path / "runs.db").close()
    return f"sqlite:///{tmp_path / 'runs.db'}"


def test_a_run_of_a_killed_process_is_finished_by_another_with_effects_once(tmp_path: Path, store_url: str) -> None:
    """A dies by SIGKILL inside a receipt; B and C sweep the same store; the run is finished once, paid once."""
    url = store_url
    ledger = tmp_path / "ledger.jsonl"
    env = {CLIENTS_VARIABLE: f"ui:{TOKEN}:start+read", "AGENT_FSM_LEDGER": str(ledger)}
    headers = {"authorization": f"Bearer {TOKEN}"}
    dying = {**env, "AGENT_FSM_DIE": "after:send_receipt"}
    with (
        serve_process(url, dying, "--recover-after", "1") as (a, first),
        serve_process(url, env, "--recover-after", "1") as (b, _),
    ):
        with contextlib.suppress(httpx.RemoteProtocolError):  # A may die before its answer is sent
            httpx.post(a + "/runs", json={"task": task_for(["A-1", "A-2"])}, headers=headers, timeout=10)
        assert first.wait(timeout=30) == -9  # killed by SIGKILL inside the receipt's handler
        [run] = httpx.get(f"{b}/runs", headers=headers, timeout=10).json()["runs"]  # begun before the kill
        run_id = run["run_id"]
        deadline = time.monotonic() + 60
        while (read := httpx.get(f"{b}/runs/{run_id}", headers=headers, timeout=10).json())["status"] == "running":
            assert time.monotonic() < deadline, f"run {run_id} was not taken over: {read}"
            time.sleep(0.2)
        assert read["status"] == "ended" and read["stop"] == "answered"
    effects = [e for e in read_ledger(ledger) if e["event"] == "effect"]
    assert [e["args"]["invoice"] for e in effects if e["tool"] == "pay"] == ["A-1", "A-2"]
    receipts = [e for e in effects if e["tool"] == "send_receipt"]
    assert {e["args"]["invoice"] for e in receipts} == {"A-1", "A-2"}
    first_receipt = [e for e in receipts if e["args"]["invoice"] == "A-1"]
    assert len(first_receipt) == 2 and len({e["key"] for e in first_receipt}) == 1  # re-run under its key
    assert [e["event"] for e in read_ledger(ledger)].count("killed") == 1
