"""
Serving on Temporal, over real HTTP on 127.0.0.1 against a real dev server and a worker: runs started as workflows,
read by query, streamed from the workflow's events, decided by its updates; the plain API's refusals unchanged.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_fsm.cli import app as cli
from agent_fsm.engine import RunEvent
from agent_fsm.serve import CLIENTS_VARIABLE
from tests import temporal_world as world
from tests.ledger_world import ledger_agent, read_ledger, task_for
from tests.person_world import shop_agent
from tests.serve_process import serve_process
from tests.test_serve_api import CLIENTS, OTHER, UI, _client, _events

pytestmark = pytest.mark.temporal

QUEUE = f"serve-{uuid.uuid4().hex[:8]}"
ROOT = Path(__file__).resolve().parents[1]
ADDRESS: list[str] = []  # the dev server's, once the fixture has it


@pytest.fixture(scope="module")
def served(temporal_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """A worker serving the ledger and the shop, and the app starting their runs on it: (base URL, ledger, writes)."""
    from agent_fsm.serve.temporal import temporal_app
    from tests.temporal_server import ThreadWorker
    from tests.web_server import serving

    ADDRESS[:] = [temporal_server.address]
    folder = tmp_path_factory.mktemp("served")
    ledger, written = folder / "ledger.jsonl", folder / "written.txt"
    agents = [ledger_agent(ledger).replace(name="ledger"), shop_agent(written), world.agent("long"), world.agent("bug")]
    worker = ThreadWorker(temporal_server.address, QUEUE, agents).start()
    try:
        with serving(temporal_app(agents, temporal_server.address, clients=CLIENTS, task_queue=QUEUE)) as base:
            yield base, ledger, written
    finally:
        worker.stop()


def _paid(ledger: Path) -> list[Any]:
    return [e["args"] for e in read_ledger(ledger) if e["event"] == "effect" and e["tool"] == "pay"]


def test_a_run_starts_as_a_workflow_and_streams_the_events_arun_hears(served: tuple[str, Path, Path]) -> None:
    """The SSE stream is numbered 1, 2, ... and carries the very events of the same run in-process, in order."""
    base, ledger, _ = served
    task = task_for(["A-1", "A-2"])
    with _client(base) as http:
        started = http.post("/runs", json={"agent": "ledger", "task": task})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        events = _events(http, run_id)
        read = http.get(f"/runs/{run_id}").json()
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["event"] == "ended" and events[-1]["answer"] == "Handled 2 invoices."
    assert (read["status"], read["stop"], read["machine_state"]) == ("ended", "answered", "Answered")
    heard: list[RunEvent] = []
    asyncio.run(ledger_agent(ledger.with_suffix(".local")).arun(task, run_id=run_id, on_event=heard.append))
    assert [e["type"] for e in events] == [e.type for e in heard]
    assert [e.get("state") for e in events] == [getattr(e, "state", None) for e in heard]
    assert [p["invoice"] for p in _paid(ledger)][-2:] == ["A-1", "A-2"]


def test_a_pause_is_decided_by_the_workflows_update_and_the_stream_goes_on(served: tuple[str, Path, Path]) -> None:
    """Paused, listed as paused, approved once (a second approval is a 409), and streamed on to its answer."""
    base, ledger, _ = served
    with _client(base) as http:
        run_id = http.post("/runs", json={"agent": "ledger", "task": task_for(["BIG-1"])}).json()["run_id"]
        paused = _events(http, run_id)
        rest = paused[-1]
        assert rest["stop"] == "awaiting_approval" and any(e["event"] == "paused" for e in paused)
        read = http.get(f"/runs/{run_id}").json()
        assert read["status"] == "paused" and read["blocked"]["name"] == "pay" and read["pause_id"] == rest["pause_id"]
        assert not [p for p in _paid(ledger) if p["invoice"] == "BIG-1"]
        decided = http.post(
            f"/runs/{run_id}/decision", json={"agent": "ledger", "decision": "approve", "pause_id": rest["pause_id"]}
        )
        assert decided.status_code == 202, decided.text
        after = _events(http, run_id, last=rest["id"])
        assert after[0]["id"] == rest["id"] + 1 and after[-1]["stop"] == "answered"
        again = http.post(
            f"/runs/{run_id}/decision", json={"agent": "ledger", "decision": "approve", "pause_id": rest["pause_id"]}
        )
        assert again.status_code == 409 and again.json()["error"]["code"] == "already_decided"
        listed = http.get("/runs", params={"status": "ended"}).json()["runs"]
        assert run_id in [r["run_id"] for r in listed]
    assert len([p for p in _paid(ledger) if p["invoice"] == "BIG-1"]) == 1


def test_a_bad_edit_decides_nothing_and_a_rejection_runs_nothing(served: tuple[str, Path, Path]) -> None:
    """An edit breaking the contract is refused by the update's validator (422); a rejection goes on unpaid."""
    base, ledger, _ = served
    with _client(base) as http:
        run_id = http.post("/runs", json={"agent": "ledger", "task": task_for(["BIG-2"])}).json()["run_id"]
        pause = _events(http, run_id)[-1]["pause_id"]
        bad = {
            "agent": "ledger",
            "decision": "edit",
            "pause_id": pause,
            "arguments": {"invoice": "BIG-2", "cents": "lots"},
        }
        refused = http.post(f"/runs/{run_id}/decision", json=bad)
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "decision_refused"
        assert http.get(f"/runs/{run_id}").json()["status"] == "paused"
        rejected = http.post(
            f"/runs/{run_id}/decision",
            json={"agent": "ledger", "decision": "reject", "pause_id": pause, "reason": "no"},
        )
        assert rejected.status_code == 202, rejected.text
        assert _events(http, run_id, last=0)[-1]["stop"] == "answered"
    assert not [p for p in _paid(ledger) if p["invoice"] == "BIG-2"]


def test_an_answer_and_a_whole_reply_are_decided_over_http(served: tuple[str, Path, Path]) -> None:
    """A wrong answer and a partial review are 422s with nothing decided; the right ones end the runs."""
    base, _, written = served
    with _client(base) as http:
        run_id, rest = _paused_as(http, "order a shirt")
        wrong = {"agent": "shop", "decision": "answer", "pause_id": rest["pause_id"], "answer": {"size": "XL"}}
        refused = http.post(f"/runs/{run_id}/decision", json=wrong)
        assert refused.status_code == 422 and "'XL' is not one of" in refused.json()["error"]["message"]
        right = {"agent": "shop", "decision": "answer", "pause_id": rest["pause_id"], "answer": {"size": "M"}}
        assert http.post(f"/runs/{run_id}/decision", json=right).status_code == 202
        assert '"size": "M"' in _events(http, run_id, last=rest["id"])[-1]["answer"]
        run_id, rest = _paused_as(http, "both, please")
        partial = {
            "agent": "shop",
            "decision": "reply",
            "pause_id": rest["pause_id"],
            "reply": {"w1": {"approve": True}},
        }
        assert http.post(f"/runs/{run_id}/decision", json=partial).status_code == 422
        assert not written.exists()
        whole = {"w1": {"arguments": {"n": 5}}, "q1": {"answer": {"size": "S"}}}
        decided = http.post(
            f"/runs/{run_id}/decision",
            json={"agent": "shop", "decision": "reply", "pause_id": rest["pause_id"], "reply": whole},
        )
        assert decided.status_code == 202, decided.text
        assert _events(http, run_id, last=rest["id"])[-1]["stop"] == "answered"
    assert written.read_text() == "5\n"


def _paused_as(http: Any, task: str) -> tuple[str, dict[str, Any]]:
    run_id: str = http.post("/runs", json={"agent": "shop", "task": task}).json()["run_id"]
    rest = _events(http, run_id)[-1]
    assert rest["stop"] == "awaiting_approval"
    return run_id, rest


def test_a_session_continues_across_workflows_and_clients_see_only_their_own(served: tuple[str, Path, Path]) -> None:
    """A session's second run starts from the first one's transcript; another client cannot read or decide it."""
    base, _, _ = served
    session = uuid.uuid4().hex[:8]
    with _client(base) as http, _client(base, OTHER) as other:
        first = http.post("/runs", json={"agent": "ledger", "task": task_for(["A-5"]), "session": session})
        first_id = first.json()["run_id"]
        assert first_id.endswith("~1") and _events(http, first_id)[-1]["stop"] == "answered"
        second_id = http.post("/runs", json={"agent": "ledger", "task": task_for(["A-6"]), "session": session})
        second_id = second_id.json()["run_id"]
        assert second_id.endswith("~2") and _events(http, second_id)[-1]["stop"] == "answered"
        for path in (f"/runs/{second_id}", f"/runs/{second_id}/events"):
            assert other.get(path).status_code == 404
    state = asyncio.run(_state_of(second_id))
    said = [m["content"] for m in state.messages if m["role"] == "user"]
    assert said[:2] == [task_for(["A-5"]), task_for(["A-6"])]


async def _state_of(run_id: str) -> Any:
    from temporalio.client import Client

    from agent_fsm.temporal import get_run

    return await get_run(await Client.connect(ADDRESS[0]), run_id).state()


def test_a_run_continued_as_new_tells_each_event_once_numbered_on(served: tuple[str, Path, Path]) -> None:
    """Rolled over (its history bound passed), the run's kept events are still those arun hears, none told twice."""
    from temporalio.client import Client

    from agent_fsm.temporal import start_run

    run_id = f"long-{uuid.uuid4().hex[:8]}"
    task = "Look twelve times."

    async def remote() -> tuple[int, list[RunEvent], bool]:
        client = await Client.connect(ADDRESS[0])
        handle = await start_run(
            client, agent="long", task=task, run_id=run_id, task_queue=QUEUE, history_bound=40, keep_events=True
        )
        await handle.result()
        latest = (await handle.handle.describe()).run_id
        first, events = await handle.events(0)
        return first, events, latest != handle.handle.first_execution_run_id

    first, events, rolled = asyncio.run(remote())
    heard: list[RunEvent] = []
    asyncio.run(world.agent_of("long").arun(task, run_id=run_id, on_event=heard.append))
    assert rolled and first >= 1
    assert [e.type for e in events] == [e.type for e in heard][first - 1 :]
    assert [getattr(e, "state", None) for e in events] == [getattr(e, "state", None) for e in heard][first - 1 :]


def named_ledger() -> Any:
    """The ledger agent by its served name, as ``--world tests.test_serve_temporal:named_ledger`` loads it."""
    return ledger_agent(Path(os.environ["AGENT_FSM_LEDGER"])).replace(name="ledger")


def test_the_command_serves_on_temporal(served: tuple[str, Path, Path], tmp_path: Path) -> None:
    """``agent-fsm serve --temporal`` in a process of its own starts a run the worker drives, streamed to its end."""
    env = {CLIENTS_VARIABLE: f"ui:{UI}:start+read", "AGENT_FSM_LEDGER": str(tmp_path / "unused.jsonl")}
    where = ("--temporal", ADDRESS[0], "--task-queue", QUEUE)  # the worker's handlers write the ledger, not it
    process = serve_process(None, env, *where, world="tests.test_serve_temporal:named_ledger")
    with process as (base, _), _client(base) as http:
        run_id = http.post("/runs", json={"task": task_for(["A-8"])}).json()["run_id"]
        assert _events(http, run_id)[-1]["stop"] == "answered"


@pytest.mark.parametrize("where", [[], ["--store", "sqlite:///x.db", "--temporal", "127.0.0.1:7233"]])
def test_the_command_takes_a_store_or_temporal(where: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither, or both: exit 1 saying which to give, before anything is opened."""
    monkeypatch.setenv(CLIENTS_VARIABLE, f"ui:{UI}:start+read")
    result = CliRunner().invoke(cli, ["serve", "--world", "tests.test_serve_temporal:named_ledger", *where])
    assert result.exit_code == 1 and "--temporal ADDRESS" in result.output
