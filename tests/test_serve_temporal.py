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
from tests.test_serve_api import CLIENTS, OTHER, UI, _client
from tests.test_serve_api import _events as _sse_events

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


def _events(http: Any, run_id: str, last: int | None = None, count: int | None = None) -> list[dict[str, Any]]:
    """The run's SSE events as its workflow numbers them (whole numbers, where a store's stream says ``P.I``)."""
    return [{**event, "id": int(event["id"])} for event in _sse_events(http, run_id, last, count)]


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


@pytest.fixture(scope="module")
def ledger_only(served: tuple[str, Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The ledger alone served on Temporal (the protocols' clients name no agent), over the same worker."""
    from agent_fsm.serve.temporal import temporal_app
    from tests.web_server import serving

    agent = ledger_agent(tmp_path_factory.mktemp("unused") / "ledger.jsonl").replace(name="ledger")
    with serving(temporal_app(agent, ADDRESS[0], clients=CLIENTS, task_queue=QUEUE)) as base:
        yield base


def test_the_official_ag_ui_client_runs_and_resumes_a_run_on_temporal(
    served: tuple[str, Path, Path], ledger_only: str
) -> None:
    """@ag-ui/client accepts every event of a workflow run; its interrupt's resume approves the payment once."""
    from tests.test_serve_ag_ui import drive

    _, ledger, _ = served
    report = drive(ledger_only, task_for(["A-3"]))
    assert "error" not in report, report.get("error")
    [run] = report["runs"]
    assert run["result"] == {"stop": "answered", "code": "answered", "answer": "Handled 1 invoices."}
    assert [e["type"] for e in report["events"]].count("TOOL_CALL_RESULT") == 3
    # The client names one thread: another client's, so the run does not continue the first one's conversation.
    report = drive(ledger_only, task_for(["BIG-5"]), '{"decision": "approve"}', token=OTHER)
    assert "error" not in report, report.get("error")
    first, second = report["runs"]
    assert first["interrupts"][0]["metadata"]["agent_fsm"]["call"]["name"] == "pay"
    assert second["result"]["stop"] == "answered"
    assert len([p for p in _paid(ledger) if p["invoice"] == "BIG-5"]) == 1


def test_the_official_a2a_client_streams_and_decides_a_task_on_temporal(
    served: tuple[str, Path, Path], ledger_only: str
) -> None:
    """a2a-sdk: working, input-required naming the call, 'approve' to the task, completed; paid once."""
    from tests.test_serve_a2a import _message, _states, _talk

    _, ledger, _ = served
    first, second = asyncio.run(
        _talk(ledger_only, UI, True, _message(task_for(["BIG-6"])), lambda task: _message("approve", task))
    )
    assert _states(first)[0] == "TASK_STATE_WORKING" and _states(first)[-1] == "TASK_STATE_INPUT_REQUIRED"
    assert _states(second)[-1] == "TASK_STATE_COMPLETED", second
    assert len([p for p in _paid(ledger) if p["invoice"] == "BIG-6"]) == 1


def test_a_run_is_streamed_by_any_serving_process_whoever_decided_it(
    served: tuple[str, Path, Path], ledger_only: str
) -> None:
    """Started through one app, decided by a RunHandle, its stream read on from another app: nothing lost."""
    from temporalio.client import Client

    from agent_fsm.temporal import get_run

    base, _, _ = served
    with _client(base) as http:
        run_id = http.post("/runs", json={"agent": "ledger", "task": task_for(["BIG-7"])}).json()["run_id"]
        paused = _events(http, run_id)

    async def approve() -> None:
        await get_run(await Client.connect(ADDRESS[0]), run_id).approve(reviewer="ana")

    asyncio.run(approve())
    with _client(ledger_only) as elsewhere:
        whole = _events(elsewhere, run_id)
        assert whole[: len(paused)] == paused  # the same events under the same numbers, read from the workflow
        assert whole[-1]["stop"] == "answered" and [e["id"] for e in whole] == list(range(1, len(whole) + 1))
    with _client(base) as http:
        assert _events(http, run_id, last=paused[-1]["id"]) == whole[len(paused) :]


def test_a2a_cancels_a_task_waiting_for_input_on_temporal(served: tuple[str, Path, Path], ledger_only: str) -> None:
    """CancelTask ends the run by the workflow's cancel update: the run ends cancelled, the task canceled, unpaid."""
    from google.protobuf import json_format

    from tests.test_serve_a2a import _connected, a2a_types
    from tests.test_serve_a2a import _paused as _a2a_paused

    _, ledger, _ = served

    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with _connected(ledger_only) as (http, client):
            task_id, out["paused"] = await _a2a_paused(client, "BIG-8")
            cancelled = await client.cancel_task(a2a_types.CancelTaskRequest(id=task_id))
            out["cancelled"] = a2a_types.TaskState.Name(cancelled.status.state)
            got = await client.get_task(a2a_types.GetTaskRequest(id=task_id))
            out["said"] = json_format.MessageToDict(got.status.message)["parts"][1]["data"]
            out["read"] = (await http.get(f"{ledger_only}/runs/{task_id}")).json()
        return out

    out = asyncio.run(scenario())
    assert out["paused"] == "TASK_STATE_INPUT_REQUIRED" and out["cancelled"] == "TASK_STATE_CANCELED"
    assert out["said"]["stop"] == "cancelled" and out["said"]["cancelled_by"] == "ui"
    assert (out["read"]["status"], out["read"]["stop"]) == ("ended", "cancelled")
    assert not [p for p in _paid(ledger) if p["invoice"] == "BIG-8"]


def test_a_run_a_bug_stopped_ends_its_stream_failed_and_is_listed_failed(served: tuple[str, Path, Path]) -> None:
    """A handler's bug fails the workflow: the stream ends with a failed record, the listing says failed."""
    base, _, _ = served
    with _client(base) as http:
        run_id = http.post("/runs", json={"agent": "bug", "task": "Go."}).json()["run_id"]
        events = _events(http, run_id)
        listed = {r["run_id"]: r for r in http.get("/runs", params={"status": "failed"}).json()["runs"]}
        read = http.get(f"/runs/{run_id}").json()
    assert events[-1]["type"] == "failed" and "failed" in events[-1]["error"]
    assert listed[run_id]["status"] == read["status"] == "failed" and read["reason"] == "the workflow is failed"


def test_a_log_the_hub_forgot_is_read_again_from_the_workflow(served: tuple[str, Path, Path]) -> None:
    """A run's log dropped from the hub (past its limit) and asked for again holds every event, from the first."""
    from temporalio.client import Client

    from agent_fsm.serve.temporal import TemporalRuns

    async def scenario() -> tuple[int, int]:
        agent = ledger_agent(Path("unused.jsonl")).replace(name="ledger")
        runs = TemporalRuns(await Client.connect(ADDRESS[0]), {"ledger": agent}, task_queue=QUEUE)
        run_id = await runs._start(agent, task_for(["A-9"]), "ui", None)
        before = [record async for record in runs.hub.open(run_id).follow(0) if record is not None]
        del runs.hub._logs[run_id]  # forgotten, as the hub forgets its oldest resting logs
        log = runs.hub.get(run_id)
        assert log is not None
        again = [record async for record in log.follow(0) if record is not None]
        await runs.aclose()
        return len(before), len(again)

    before, again = asyncio.run(scenario())
    assert before == again and before > 5
