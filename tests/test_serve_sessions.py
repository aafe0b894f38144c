"""
Sessions: a conversation continued across stored runs, in Python and as the protocols' threads and contexts.

The model answers with how many user turns it was shown, so a run that
continues its session says 2 where a fresh one says 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_fsm import Agent, answer_message
from agent_fsm.serve import Clients, serve_app
from agent_fsm.store import RunExists, Session, SessionBusy, SqliteStore, open_store
from tests.ledger_world import ledger_agent, task_for
from tests.web_server import serving

UI = "ui-token-0123456789abcdef"
OTHER = "other-token-0123456789ab"
CLIENTS = Clients.parse(f"ui:{UI}:start+read+decide other:{OTHER}:start+read")


class Counting:
    """Answers with the number of user turns it was shown."""

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        return answer_message(f"{sum(1 for m in messages if m.get('role') == 'user')} turns")


def test_a_session_continues_its_conversation_in_ordinary_stored_runs(tmp_path: Path) -> None:
    """Each run of a session is a stored run named in order, and starts from the last one's transcript."""
    with SqliteStore(tmp_path / "runs.db") as store:
        chat = Session(store, Agent(Counting(), {}), "chat-1")
        assert [chat.run(t).answer for t in ("hello", "and then?", "bye")] == ["1 turns", "2 turns", "3 turns"]
        assert chat.run_ids() == ["chat-1~1", "chat-1~2", "chat-1~3"]
        assert store.load("chat-1~3").state.messages[1]["content"] == "hello"
        other = Session(store, Agent(Counting(), {}), "chat-2")
        assert other.run("hi").answer == "1 turns"  # sessions do not share history


def test_a_session_waits_for_its_paused_run(tmp_path: Path) -> None:
    """While the last run waits for a person, the session refuses a new task; a taken next id is RunExists."""
    with SqliteStore(tmp_path / "runs.db") as store:
        chat = Session(store, ledger_agent(tmp_path / "ledger.jsonl"), "pay-1")
        assert chat.run(task_for(["BIG-1"])).stop.value == "awaiting_approval"
        with pytest.raises(SessionBusy, match="paused"):
            chat.run(task_for(["A-1"]))
        fresh = Session(store, ledger_agent(tmp_path / "ledger.jsonl"), "pay-2")
        run_id, _ = fresh.next_run()
        fresh.run(task_for(["A-2"]))
        with pytest.raises(RunExists):  # a second process that computed the same next run loses
            fresh.agent.run(task_for(["A-3"]), store=store, run_id=run_id)


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    """The counting agent served over a SQLite file."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with serving(serve_app(Agent(Counting(), {}), lambda: open_store(url), clients=CLIENTS)) as got:
        yield got


def _ag_ui(base: str, thread: str, text: str, token: str = UI) -> dict[str, Any]:
    given = {"threadId": thread, "runId": text, "messages": [{"id": text, "role": "user", "content": text}]}
    finished: dict[str, Any] = {}
    with httpx.stream("POST", base + "/ag-ui", json=given, headers={"authorization": f"Bearer {token}"}) as answer:
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                finished = event if event["type"] == "RUN_FINISHED" else finished
    return finished


def test_an_ag_ui_thread_is_a_session_kept_in_the_store(base: str) -> None:
    """Runs on one threadId continue one conversation; another thread, or another client's, starts afresh."""
    assert _ag_ui(base, "t-1", "hello")["result"]["answer"] == "1 turns"
    assert _ag_ui(base, "t-1", "again")["result"]["answer"] == "2 turns"
    assert _ag_ui(base, "t-2", "hello")["result"]["answer"] == "1 turns"
    assert _ag_ui(base, "t-1", "hello", token=OTHER)["result"]["answer"] == "1 turns"


def test_the_plain_api_takes_a_session_and_an_a2a_context_is_one(base: str) -> None:
    """POST /runs with ``session`` continues it; A2A messages sharing a contextId continue theirs."""
    headers = {"authorization": f"Bearer {UI}"}
    answers = []
    for task in ("a", "b"):
        run_id = httpx.post(base + "/runs", json={"task": task, "session": "s"}, headers=headers).json()["run_id"]
        with httpx.stream("GET", f"{base}/runs/{run_id}/events", headers=headers, timeout=20) as events:
            last = [line for line in events.iter_lines() if line.startswith("data: ")][-1]
        answers.append(json.loads(last[6:])["answer"])
    assert answers == ["1 turns", "2 turns"]

    def send(context: str) -> str:
        message = {"messageId": "m", "role": "ROLE_USER", "contextId": context, "parts": [{"text": "hi"}]}
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        task = httpx.post(base + "/a2a", json=rpc, headers=headers, timeout=20).json()["result"]["task"]
        return str(task["artifacts"][0]["parts"][0]["text"])

    assert [send("c-1"), send("c-1"), send("c-2")] == ["1 turns", "2 turns", "1 turns"]
