"""
Background runs across processes: a serving process killed with SIGKILL mid-run has its run taken up by another.

Each process takes over the runs left ``running`` without a commit for
``--recover-after`` seconds, claimed under row locks (``FOR UPDATE SKIP
LOCKED`` on PostgreSQL, SQLite's single writer), so one process continues
each; the ledger shows each effect done once, an idempotent one re-run under
the same key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from agent_fsm.serve import CLIENTS_VARIABLE
from agent_fsm.serve.stream import Hub
from agent_fsm.serve.workers import Workers
from agent_fsm.store import SqliteStore, open_store
from tests.ledger_world import ledger_agent, read_ledger, task_for
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
        serve_process(url, env, "--recover-after", "1"),
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


_SWEEPER = """
import json, sys, time
from agent_fsm.store import open_store
store = open_store(sys.argv[1])
while time.time() < float(sys.argv[2]):  # both processes start sweeping at the same moment
    time.sleep(0.001)
claimed = []
while taken := store.claim_stale(1.0, limit=3):
    claimed += [stored.run_id for stored in taken]
print(json.dumps(claimed))
"""


def _stale_runs(url: str, count: int) -> list[str]:
    """``count`` runs begun and left ``running``, as a killed process leaves them, past a second old."""
    agent = ledger_agent(Path(os.devnull))
    store = open_store(url)
    ids = [f"left.{index:03d}" for index in range(count)]
    for run_id in ids:
        store.begin(run_id, agent.start(task_for(["A-1"]), run_id=run_id))
    store.close()
    time.sleep(1.1)
    return ids


def test_two_processes_sweeping_at_once_claim_each_run_once(store_url: str) -> None:
    """Two processes sweep one store in the same instant, a few runs a claim: every run is claimed, none twice."""
    ids = _stale_runs(store_url, 30)
    at = time.time() + 1.5
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    command = [sys.executable, "-c", _SWEEPER, store_url, str(at)]
    sweepers = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    claimed = [json.loads(sweeper.communicate(timeout=60)[0]) for sweeper in sweepers]
    assert all(sweeper.returncode == 0 for sweeper in sweepers)
    every = claimed[0] + claimed[1]
    assert sorted(every) == ids, claimed  # each once: no run driven by both


def test_a_run_locked_by_another_claim_is_skipped_not_waited_for(postgres_dsn: str) -> None:
    """On PostgreSQL a sweep passes over a run whose row another transaction holds, and claims the rest at once."""
    psycopg = pytest.importorskip("psycopg")
    ids = _stale_runs(postgres_dsn, 3)
    store = open_store(postgres_dsn)
    claimed: list[str] = []
    with psycopg.connect(postgres_dsn) as holder, holder.transaction():
        holder.execute("SELECT run_id FROM agent_fsm_runs WHERE run_id = %s FOR UPDATE", (ids[0],))
        sweep = threading.Thread(target=lambda: claimed.extend(s.run_id for s in store.claim_stale(1.0)), daemon=True)
        sweep.start()
        sweep.join(timeout=5)
        waited = sweep.is_alive()
    sweep.join(timeout=10)
    store.close()
    assert not waited, "the sweep waited for the row another transaction holds"
    assert claimed == ids[1:]


def test_a_sweep_claims_no_more_runs_than_the_pool_has_free_threads(tmp_path: Path) -> None:
    """Five runs left running, a pool of two: a sweep takes two, leaving the rest to another process or sweep."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ids = _stale_runs(url, 5)
    store = open_store(url)
    loop = asyncio.new_event_loop()
    workers = Workers(store, Hub(loop), size=2)
    try:
        taken = workers.sweep({"ledger": ledger_agent(tmp_path / "ledger.jsonl")}, older_than=1.0)
    finally:
        workers.close()
        loop.close()
    assert taken == ids[:2]
    left = sorted(s.run_id for s in store.runs("running"))
    store.close()
    assert left == ids[2:]
