"""
One run's event stream across ``agent-fsm serve`` processes on one store, over real HTTP, on SQLite and PostgreSQL.

A client reading a run from one process goes on with ``Last-Event-ID`` at
another while the first still drives it, or at a process started after the
first was killed with SIGKILL mid-run: it gets every event it had not had,
none twice, in order, exactly the stream any process gives from the start
once the run has ended.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import httpx

from agent_fsm.serve import CLIENTS_VARIABLE
from tests.ledger_world import read_ledger, task_for
from tests.serve_process import serve_process, sse_events
from tests.test_serve_workers import store_url  # noqa: F401  (the store fixture: SQLite, PostgreSQL)

TOKEN = "ui-token-0123456789abcdef"
HEADERS = {"authorization": f"Bearer {TOKEN}"}


def _read(base: str, run_id: str, last: str | None = None, count: int | None = None) -> list[dict[str, Any]]:
    """The run's SSE events after ``last`` until it rests, the first ``count``, or the server goes away."""
    headers = {**HEADERS, **({"last-event-id": last} if last is not None else {})}
    lines: list[str] = []  # what came before the server went away, if it did
    with (
        contextlib.suppress(httpx.RemoteProtocolError, httpx.ReadError),
        httpx.stream("GET", f"{base}/runs/{run_id}/events", headers=headers, timeout=60) as response,
    ):
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            lines.append(line)
            if count is not None and line == "" and len(sse_events(lines)) == count:
                break
    return sse_events(lines, count)


def _places(events: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(int(p), int(i)) for p, _, i in (e["id"].partition(".") for e in events)]


def _whole(base: str, run_id: str) -> list[dict[str, Any]]:
    """The run's stream from its start, once it has ended: every event, ordered by id, each once."""
    whole = _read(base, run_id, "0")
    assert _places(whole) == sorted(set(_places(whole))) and whole[-1]["stop"] == "answered"
    return whole


def test_a_client_switching_process_mid_run_gets_the_rest_once_in_order(tmp_path: Path, store_url: str) -> None:  # noqa: F811
    """Cut after four events from A while A drives the run, the stream goes on at B from the next one to the end."""
    ledger = tmp_path / "ledger.jsonl"
    env = {CLIENTS_VARIABLE: f"ui:{TOKEN}:start+read+decide", "AGENT_FSM_LEDGER": str(ledger), "AGENT_FSM_SLOW": "0.15"}
    with serve_process(store_url, env) as (a, _), serve_process(store_url, env) as (b, _):
        run_id = httpx.post(f"{a}/runs", json={"task": task_for(["A-1", "A-2"])}, headers=HEADERS).json()["run_id"]
        first = _read(a, run_id, count=4)
        assert httpx.get(f"{b}/runs/{run_id}", headers=HEADERS).json()["status"] == "running"  # A drives it still
        rest = _read(b, run_id, first[-1]["id"])
        assert first + rest == _whole(b, run_id) == _whole(a, run_id)
    paid = [e["args"]["invoice"] for e in read_ledger(ledger) if e["event"] == "effect" and e["tool"] == "pay"]
    assert paid == ["A-1", "A-2"]


def test_a_pause_decided_at_another_process_streams_on_there_and_back(tmp_path: Path, store_url: str) -> None:  # noqa: F811
    """Paused at A, decided at B (which drives it on): a client waiting at A gets the decision and the rest."""
    ledger = tmp_path / "ledger.jsonl"
    env = {CLIENTS_VARIABLE: f"ui:{TOKEN}:start+read+decide", "AGENT_FSM_LEDGER": str(ledger), "AGENT_FSM_SLOW": "0.05"}
    with serve_process(store_url, env) as (a, _), serve_process(store_url, env) as (b, _):
        run_id = httpx.post(f"{a}/runs", json={"task": task_for(["BIG-1", "A-2"])}, headers=HEADERS).json()["run_id"]
        paused = _read(a, run_id)
        assert paused[-1]["stop"] == "awaiting_approval"
        decision = {"decision": "approve", "pause_id": paused[-1]["pause_id"]}
        with httpx.Client(timeout=60) as waiting:  # a client at A waits at the pause while B decides
            request = waiting.build_request(
                "GET", f"{a}/runs/{run_id}/events", headers={**HEADERS, "last-event-id": paused[-1]["id"]}
            )
            response = waiting.send(request, stream=True)
            time.sleep(0.3)
            assert httpx.post(f"{b}/runs/{run_id}/decision", json=decision, headers=HEADERS).status_code == 202
            body = b"".join(response.iter_bytes()).decode()
            response.close()
        got = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
        ids = [line[4:] for line in body.splitlines() if line.startswith("id: ")]
        rest = [{"id": i, "event": e["type"], **e} for i, e in zip(ids, got, strict=True)]
        assert rest[0]["event"] == "decided" and rest[-1]["stop"] == "answered"
        assert paused + rest == _whole(a, run_id) == _whole(b, run_id)


def test_a_stream_cut_by_sigkill_goes_on_at_the_restarted_process(tmp_path: Path, store_url: str) -> None:  # noqa: F811
    """A dies by SIGKILL inside a receipt mid-stream; restarted, it takes the run over and the stream goes on."""
    ledger = tmp_path / "ledger.jsonl"
    env = {CLIENTS_VARIABLE: f"ui:{TOKEN}:start+read", "AGENT_FSM_LEDGER": str(ledger), "AGENT_FSM_SLOW": "0.05"}
    dying = {**env, "AGENT_FSM_DIE": "after:send_receipt"}
    with serve_process(store_url, dying, "--recover-after", "1") as (a, first):
        run_id = httpx.post(f"{a}/runs", json={"task": task_for(["A-1", "A-2"])}, headers=HEADERS).json()["run_id"]
        before = _read(a, run_id)  # until the connection drops with the process
        assert first.wait(timeout=30) == -9
    assert before and before[-1]["event"] != "ended"
    with serve_process(store_url, env, "--recover-after", "1") as (again, _):
        rest = _read(again, run_id, before[-1]["id"])
        assert before + rest == _whole(again, run_id)
    effects = [e for e in read_ledger(ledger) if e["event"] == "effect"]
    assert [e["args"]["invoice"] for e in effects if e["tool"] == "pay"] == ["A-1", "A-2"]
    assert [e["event"] for e in read_ledger(ledger)].count("killed") == 1
