"""
The plain serving API over real HTTP on 127.0.0.1: start, list, read, stream (SSE, resumed), decide; and its refusals.

The agent is the ledger's: every payment is a line in a file, so a decision's
effect is counted, not assumed. Runs are kept in SQLite on disk.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from agent_fsm.cli import app as cli
from agent_fsm.serve import CLIENTS_VARIABLE, Clients, ClientsMissing, serve_app
from agent_fsm.store import SqliteStore, open_store
from tests.ledger_world import ledger_agent, read_ledger, task_for
from tests.serve_process import serve_process, served_shop, sse_events
from tests.web_server import serving

UI = "ui-token-0123456789abcdef"
OTHER = "other-token-0123456789ab"
READER = "reader-token-0123456789a"
CLIENTS = Clients.parse(f"ui:{UI}:start+read+decide other:{OTHER}:start+read+decide,reader:{READER}:read")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[str, Path, str]]:
    """A served ledger agent on a SQLite file: (base URL, ledger path, store URL)."""
    ledger = tmp_path / "ledger.jsonl"
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    app = serve_app(ledger_agent(ledger), lambda: open_store(url), clients=CLIENTS, workers=2)
    with serving(app) as base:
        yield base, ledger, url


def _client(base: str, token: str = UI) -> httpx.Client:
    return httpx.Client(base_url=base, timeout=20, headers={"authorization": f"Bearer {token}"})


def _start(http: httpx.Client, invoices: list[str]) -> str:
    answer = http.post("/runs", json={"task": task_for(invoices)})
    assert answer.status_code == 202, answer.text
    run_id: str = answer.json()["run_id"]
    return run_id


def _events(
    http: httpx.Client, run_id: str, last: str | int | None = None, count: int | None = None
) -> list[dict[str, Any]]:
    """The SSE events of the run after ``last`` until it rests (or the first ``count``), each with its id."""
    headers = {} if last is None else {"last-event-id": str(last)}
    with http.stream("GET", f"/runs/{run_id}/events", headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return sse_events(response.iter_lines(), count)


def test_a_started_run_is_stored_before_the_answer_and_streams_to_its_end(world: tuple[str, Path, str]) -> None:
    """The run is in the store when the answer arrives; its events come in the order of their ids, ending answered."""
    base, ledger, url = world
    with _client(base) as http:
        run_id = _start(http, ["A-1", "A-2"])
        with SqliteStore(url.removeprefix("sqlite:///")) as store:
            assert store.load(run_id).run_id == run_id  # in the store before the caller was answered
        events = _events(http, run_id)
        places = [tuple(map(int, e["id"].split("."))) for e in events]
        assert places == sorted(set(places)) and places[0] == (1, 0)
        assert events[-1]["event"] == "ended" and events[-1]["stop"] == "answered"
        assert events[-1]["answer"] == "Handled 2 invoices."
        read = http.get(f"/runs/{run_id}").json()
        assert read["status"] == "ended" and read["stop"] == "answered"
    paid = [e for e in read_ledger(ledger) if e["event"] == "effect" and e["tool"] == "pay"]
    assert [e["args"]["invoice"] for e in paid] == ["A-1", "A-2"]


def test_a_stream_resumed_from_last_event_id_loses_and_repeats_nothing(world: tuple[str, Path, str]) -> None:
    """Cut after three events and resumed with Last-Event-ID, the stream goes on exactly where it stopped."""
    base, _, _ = world
    with _client(base) as http:
        run_id = _start(http, ["A-1", "A-2", "A-3"])
        whole = _events(http, run_id)
        first = _events(http, run_id, count=3)
        rest = _events(http, run_id, last=first[-1]["id"])
        assert first + rest == whole
        assert _events(http, run_id, last=whole[-2]["id"]) == whole[-1:]


def test_a_pause_is_decided_once_and_the_run_goes_on_in_the_same_stream(world: tuple[str, Path, str]) -> None:
    """A gated payment rests the run; approving it continues the stream; a second decision of it is a 409."""
    base, ledger, _ = world
    with _client(base) as http:
        run_id = _start(http, ["BIG-1"])
        paused = _events(http, run_id)
        rest = paused[-1]
        assert rest["event"] == "ended" and rest["stop"] == "awaiting_approval" and rest["pause_id"]
        assert any(e["event"] == "paused" for e in paused)
        listed = http.get("/runs", params={"status": "paused"}).json()["runs"]
        assert [r["run_id"] for r in listed] == [run_id] and listed[0]["blocked"]["name"] == "pay"
        assert not [e for e in read_ledger(ledger) if e["event"] == "effect" and e["tool"] == "pay"]
        decided = http.post(f"/runs/{run_id}/decision", json={"decision": "approve", "pause_id": rest["pause_id"]})
        assert decided.status_code == 202, decided.text
        after = _events(http, run_id, last=rest["id"])
        assert after[0]["event"] == "decided" and after[0]["decision"] == "approve" and after[0]["reviewer"] == "ui"
        assert after[0]["id"] == f"{int(rest['id'].split('.')[0]) + 1}.0" and after[-1]["stop"] == "answered"
        again = http.post(f"/runs/{run_id}/decision", json={"decision": "approve", "pause_id": rest["pause_id"]})
        assert again.status_code == 409 and again.json()["error"]["code"] == "already_decided"
    paid = [e for e in read_ledger(ledger) if e["event"] == "effect" and e["tool"] == "pay"]
    assert len(paid) == 1


def test_an_edit_is_judged_by_the_tool_contract_and_a_rejection_tells_the_model(world: tuple[str, Path, str]) -> None:
    """An edit breaking the contract is a 422 with nothing decided; a rejection goes on without paying."""
    base, ledger, _ = world
    with _client(base) as http:
        run_id = _start(http, ["BIG-2"])
        pause = _events(http, run_id)[-1]["pause_id"]
        bad = {"decision": "edit", "pause_id": pause, "arguments": {"invoice": "BIG-2", "cents": "lots"}}
        refused = http.post(f"/runs/{run_id}/decision", json=bad)
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "decision_refused"
        assert http.get(f"/runs/{run_id}").json()["status"] == "paused"
        no_reason = http.post(f"/runs/{run_id}/decision", json={"decision": "reject", "pause_id": pause})
        assert no_reason.status_code == 422
        unanswered = http.post(f"/runs/{run_id}/decision", json={"decision": "answer", "pause_id": pause})
        assert unanswered.status_code == 422  # an answer without its value
        not_asked = {"decision": "answer", "pause_id": pause, "answer": {"paid": True}}
        answered = http.post(f"/runs/{run_id}/decision", json=not_asked)  # the call is not a person's to answer
        assert answered.status_code == 422 and answered.json()["error"]["code"] == "decision_refused"
        unknown = http.post(f"/runs/{run_id}/decision", json={"decision": "shrug", "pause_id": pause})
        assert unknown.status_code == 422
        rejected = http.post(f"/runs/{run_id}/decision", json={"decision": "reject", "pause_id": pause, "reason": "no"})
        assert rejected.status_code == 202, rejected.text
        last = _events(http, run_id, last=0)[-1]
        assert last["event"] == "ended" and last["stop"] != "awaiting_approval"
    assert not [e for e in read_ledger(ledger) if e["event"] == "effect" and e["tool"] == "pay"]


def test_an_approved_edit_is_what_runs(world: tuple[str, Path, str]) -> None:
    """An edited call within the contract is approved and run with the edited arguments."""
    base, ledger, _ = world
    with _client(base) as http:
        run_id = _start(http, ["BIG-3"])
        pause = _events(http, run_id)[-1]["pause_id"]
        edit = {"decision": "edit", "pause_id": pause, "arguments": {"invoice": "BIG-3", "cents": 7}}
        assert http.post(f"/runs/{run_id}/decision", json=edit).status_code == 202
        assert _events(http, run_id, last=0)[-1]["stop"] == "answered"
    paid = [e for e in read_ledger(ledger) if e["event"] == "effect" and e["tool"] == "pay"]
    assert [e["args"] for e in paid] == [{"invoice": "BIG-3", "cents": 7}]


def test_a_client_sees_and_decides_only_its_own_runs(world: tuple[str, Path, str]) -> None:
    """Another client's run is a 404 to read, stream or decide, and absent from the list; pages are keyed."""
    base, _, _ = world
    with _client(base) as ui, _client(base, OTHER) as other, _client(base, READER) as reader:
        mine = sorted(_start(ui, [f"A-{i}"]) for i in range(3))
        theirs = _start(other, ["BIG-9"])
        pause = _events(other, theirs)[-1]["pause_id"]
        for path in (f"/runs/{theirs}", f"/runs/{theirs}/events"):
            refused = ui.get(path)
            assert refused.status_code == 404 and refused.json()["error"]["code"] == "no_such_run"
        decided = ui.post(f"/runs/{theirs}/decision", json={"decision": "approve", "pause_id": pause})
        assert decided.status_code == 404
        first = ui.get("/runs", params={"limit": 2}).json()
        second = ui.get("/runs", params={"limit": 2, "after": first["next"]}).json()
        assert [r["run_id"] for r in first["runs"] + second["runs"]] == mine and second["next"] is None
        assert reader.get("/runs").json()["runs"] == []
        start = reader.post("/runs", json={"task": task_for(["A-9"])})
        assert start.status_code == 403 and start.json()["error"]["code"] == "forbidden"
        assert other.get(f"/runs/{theirs}").json()["status"] == "paused"


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789", "x"])
def test_no_token_or_an_unknown_one_is_a_401(world: tuple[str, Path, str], token: str | None) -> None:
    """Without a known bearer token nothing is answered but a typed 401 asking for one."""
    base, _, _ = world
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    for method, path in (("GET", "/runs"), ("POST", "/runs"), ("GET", "/agents")):
        answer = httpx.request(method, base + path, headers=headers, json={"task": "x"}, timeout=10)
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
        assert answer.json()["error"]["code"] == "unauthenticated"


def test_bad_bodies_are_typed_refusals_and_answers_carry_the_security_headers(world: tuple[str, Path, str]) -> None:
    """Too large, not JSON, not an object, no task, unknown agent or route: each a 4xx JSON answer, headers on."""
    base, _, _ = world
    with _client(base) as http:
        cases = [
            (
                http.post("/runs", content=b"{" + b" " * 300_000 + b"}", headers={"content-type": "application/json"}),
                413,
            ),
            (http.post("/runs", content=b"task=x", headers={"content-type": "text/plain"}), 415),
            (http.post("/runs", content=b"{nope", headers={"content-type": "application/json"}), 422),
            (http.post("/runs", json=["a list"]), 422),
            (http.post("/runs", json={"task": ""}), 422),
            (http.post("/runs", json={"task": "x", "agent": "nobody"}), 422),
            (http.get("/nowhere"), 404),
            (http.get("/runs", params={"limit": "9999"}), 422),
            (http.get("/runs/ui.nothing/events", headers={"last-event-id": "x"}), 404),
        ]
        for answer, status in cases:
            assert answer.status_code == status, answer.text
            assert answer.json()["error"]["code"]
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["x-frame-options"] == "DENY"
            assert "default-src 'none'" in answer.headers["content-security-policy"]


def test_cors_is_off_unless_origins_are_named(tmp_path: Path) -> None:
    """A browser's preflight gets no CORS grant by default, and one for a named origin only when configured."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    preflight = {"origin": "https://ui.example", "access-control-request-method": "POST"}
    agent = ledger_agent(tmp_path / "ledger.jsonl")
    with serving(serve_app(agent, lambda: open_store(url), clients=CLIENTS)) as base:
        assert "access-control-allow-origin" not in httpx.options(base + "/runs", headers=preflight).headers
    named = serve_app(agent, lambda: open_store(url), clients=CLIENTS, cors_origins=("https://ui.example",))
    with serving(named) as base:
        granted = httpx.options(base + "/runs", headers=preflight)
        assert granted.headers["access-control-allow-origin"] == "https://ui.example"
        other = httpx.options(base + "/runs", headers={**preflight, "origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


@pytest.mark.parametrize(
    "text",
    [
        "",
        "ui:short:read",
        "ui:0123456789abcdef0123",  # no scopes
        "ui:0123456789abcdef0123:read+delete",
        "u.i:0123456789abcdef0123:read",  # a dot would make run ownership ambiguous
        "ui:0123456789abcdef0123:read ui:fedcba98765432100123:read",
    ],
)
def test_malformed_clients_are_refused(text: str) -> None:
    """Every malformed ``AGENT_FSM_CLIENTS`` is a ClientsMissing, never a server open to anyone."""
    with pytest.raises(ClientsMissing):
        Clients.parse(text)


def test_the_command_refuses_to_start_without_clients(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``agent-fsm serve`` without AGENT_FSM_CLIENTS exits 1 saying how to set it."""
    monkeypatch.delenv(CLIENTS_VARIABLE, raising=False)
    result = CliRunner().invoke(
        cli, ["serve", "--store", f"sqlite:///{tmp_path / 'runs.db'}", "--world", "tests.serve_world:agent"]
    )
    assert result.exit_code == 1 and CLIENTS_VARIABLE in result.output


def test_the_command_serves_the_world_on_loopback(tmp_path: Path) -> None:
    """``agent-fsm serve`` in a process of its own answers on 127.0.0.1 and drives a run to its end."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    SqliteStore(tmp_path / "runs.db").close()
    env = {CLIENTS_VARIABLE: f"ui:{UI}:start+read", "AGENT_FSM_LEDGER": str(tmp_path / "ledger.jsonl")}
    with serve_process(url, env) as (base, _), _client(base) as http:
        run_id = _start(http, ["A-7"])
        assert _events(http, run_id)[-1]["stop"] == "answered"


class _BrokenListing(SqliteStore):
    """A store whose listing fails as a bug would: the server must answer, not leak a traceback."""

    def runs(self, status: str | None = None) -> list[Any]:
        raise RuntimeError("a bug in the listing")


def test_a_failure_is_a_json_500_with_the_headers(tmp_path: Path) -> None:
    """An unexpected failure is answered with a typed JSON 500 carrying the security headers, no traceback."""
    agent = ledger_agent(tmp_path / "ledger.jsonl")
    with serving(serve_app(agent, lambda: _BrokenListing(tmp_path / "runs.db"), clients=CLIENTS)) as base:
        answer = httpx.get(base + "/runs", headers={"authorization": f"Bearer {UI}"}, timeout=10)
    assert answer.status_code == 500 and answer.json() == {
        "error": {"code": "server_error", "message": "the server failed on this request; it was logged"}
    }
    assert answer.headers["x-frame-options"] == "DENY" and "bug in the listing" not in answer.text


def test_settling_the_collector_freezes_start_up_and_raises_the_thresholds() -> None:
    """``settle_gc`` (what ``agent-fsm serve`` calls once started) freezes what is alive and sets GC_THRESHOLD."""
    probe = (
        "import gc; from agent_fsm.serve import GC_THRESHOLD, settle_gc; settle_gc(); "
        "print(gc.get_threshold() == GC_THRESHOLD, gc.get_freeze_count() > 1000)"
    )
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": root}
    )
    assert done.stdout.split() == ["True", "True"], done.stderr


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A served shop whose question a person answers, on a SQLite file: (base URL, file of its writes)."""
    with served_shop(tmp_path, CLIENTS) as got:
        yield got


def _paused(http: httpx.Client, task: str) -> tuple[str, dict[str, Any]]:
    """A run of ``task`` started and streamed to its pause: its id and its last event."""
    run_id: str = http.post("/runs", json={"task": task}).json()["run_id"]
    rest = _events(http, run_id)[-1]
    assert rest["stop"] == "awaiting_approval"
    return run_id, rest


def test_a_person_answers_over_http_and_a_wrong_answer_decides_nothing(shop: tuple[str, Path]) -> None:
    """An answer breaking the result schema is a 422 naming the problem, the pause still open; a valid one goes on."""
    base, _ = shop
    with _client(base) as http:
        run_id, rest = _paused(http, "order a shirt")
        assert http.get(f"/runs/{run_id}").json()["blocked"]["arguments"] == {"question": "Size?"}
        wrong = {"decision": "answer", "pause_id": rest["pause_id"], "answer": {"size": "XL"}}
        refused = http.post(f"/runs/{run_id}/decision", json=wrong)
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "decision_refused"
        assert "'XL' is not one of" in refused.json()["error"]["message"]
        assert http.get(f"/runs/{run_id}").json()["status"] == "paused"
        blank = http.post(f"/runs/{run_id}/decision", json={"decision": "approve", "pause_id": rest["pause_id"]})
        assert blank.status_code == 422  # a question is answered, not approved
        right = {"decision": "answer", "pause_id": rest["pause_id"], "answer": {"size": "M"}}
        answered = http.post(f"/runs/{run_id}/decision", json=right)
        assert answered.status_code == 202 and answered.json()["decision"] == "answer", answered.text
        after = _events(http, run_id, last=rest["id"])
        assert after[-1]["stop"] == "answered" and '"size": "M"' in after[-1]["answer"]
        again = http.post(f"/runs/{run_id}/decision", json=right)
        assert again.status_code == 409


def test_a_reply_is_decided_whole_over_http(shop: tuple[str, Path]) -> None:
    """A write and a question of one reply: a partial review is a 422 with nothing written; the whole one runs both."""
    base, written = shop
    with _client(base) as http:
        run_id, rest = _paused(http, "both, please")
        partial = {"decision": "reply", "pause_id": rest["pause_id"], "reply": {"w1": {"approve": True}}}
        refused = http.post(f"/runs/{run_id}/decision", json=partial)
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "decision_refused"
        malformed = {"decision": "reply", "pause_id": rest["pause_id"], "reply": {"w1": {"shrug": 1}}}
        assert http.post(f"/runs/{run_id}/decision", json=malformed).status_code == 422
        assert not written.exists()
        whole = {"w1": {"arguments": {"n": 5}}, "q1": {"answer": {"size": "S"}}}
        decided = http.post(
            f"/runs/{run_id}/decision", json={"decision": "reply", "pause_id": rest["pause_id"], "reply": whole}
        )
        assert decided.status_code == 202, decided.text
        after = _events(http, run_id, last=rest["id"])
        assert after[-1]["stop"] == "answered" and '"size": "S"' in after[-1]["answer"]
    assert written.read_text() == "5\n"


def test_a_paused_run_is_cancelled_over_http_once_and_a_working_or_ended_one_is_not(
    world: tuple[str, Path, str],
) -> None:
    """
    ``POST /runs/{id}/cancel`` ends a paused run ``cancelled`` (the stream goes on to that ending; nothing is
    paid; recorded as the client's ``cancel``); a second cancel, or one of a run not paused, is a 409; the
    decision endpoint takes ``cancel`` too; a reader's token may not cancel.
    """
    base, ledger, url = world
    with _client(base) as http, _client(base, READER) as reader:
        run_id = _start(http, ["BIG-1"])
        rest = _events(http, run_id)[-1]
        assert rest["stop"] == "awaiting_approval"
        assert reader.post(f"/runs/{run_id}/cancel", json={}).status_code == 403
        cancelled = http.post(f"/runs/{run_id}/cancel", json={"reason": "wrong vendor"})
        assert cancelled.status_code == 202, cancelled.text
        after = _events(http, run_id, last=rest["id"])
        assert after[-1]["event"] == "ended" and after[-1]["stop"] == "cancelled"
        assert http.get(f"/runs/{run_id}").json()["stop"] == "cancelled"
        again = http.post(f"/runs/{run_id}/cancel", json={})
        assert again.status_code == 409 and again.json()["error"]["code"] == "not_cancelable"
        other = _start(http, ["BIG-2"])
        pause = _events(http, other)[-1]["pause_id"]
        by_decision = http.post(f"/runs/{other}/decision", json={"decision": "cancel", "pause_id": pause})
        assert by_decision.status_code == 202, by_decision.text
        third = _start(http, ["BIG-3"])
        _events(http, third)
        assert (
            http.post(f"/runs/{third}/cancel", content=b"not json", headers={"content-type": "text/plain"}).status_code
            == 415
        )
        assert http.post(f"/runs/{third}/cancel").status_code == 202  # no body at all: no reason given
    with SqliteStore(url.removeprefix("sqlite:///")) as store:
        [decision] = store.history(run_id)
        assert (decision.decision, decision.reviewer, decision.reason) == ("cancel", "ui", "wrong vendor")
        assert store.load(other).summary.stop == store.load(third).summary.stop == "cancelled"
    assert not [e for e in read_ledger(ledger) if e["event"] == "effect" and e["tool"] == "pay"]
