"""
The kept event stream: what a process derives as it drives a run is what any process reads from the store after.

Runs of the ledger and the shop are driven by a real pool on a SQLite file;
each run's events, as derived while it went (the process's log), are compared
with those the store gives afterwards, id for id. The streams across processes
are in tests/test_serve_processes.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_fsm import Agent
from agent_fsm.serve.kept import Kept, event_id, stored_events
from agent_fsm.serve.stream import Hub
from agent_fsm.serve.workers import Workers
from agent_fsm.store import SqliteStore
from agent_fsm.web.decisions import read_form
from tests.ledger_world import ledger_agent, task_for
from tests.person_world import shop_agent
from tests.test_store_failed import _truthy_gate

WHOLE = '{"w1": {"approve": true}, "q1": {"answer": {"size": "S"}}}'
"""A whole reply's decision, as a form sends it."""


async def _rest(hub: Hub, run_id: str) -> dict[str, Any]:
    """Wait until the run rests; its last record's data."""
    log = hub.get(run_id)
    assert log is not None
    last: dict[str, Any] = {}
    async for record in log.follow(0, keepalive=5):
        assert record is not None, "the run did not rest within 5 s"
        last = record.data
    return last


def _drive(
    tmp_path: Path, world: Callable[[Path], Agent], task: str, decisions: list[dict[str, Any]]
) -> tuple[list[Kept], list[Kept]]:
    """Drive ``task`` by a pool, taking ``decisions`` at its pauses; (the events derived live, those stored)."""
    agent = world(tmp_path / "effects")
    store = SqliteStore(tmp_path / "runs.db")

    async def drive() -> list[Kept]:
        hub = Hub(asyncio.get_running_loop())
        workers = Workers(store, hub, size=2)
        run_id = await asyncio.to_thread(workers.start, agent, task, client="t")
        rest = await _rest(hub, run_id)
        for body in decisions:
            form = {**body, "action": body["decision"], "pause_id": rest["pause_id"]}
            await workers.decide(agent, read_form(run_id, form), client="t", given=body.get("answer"))
            rest = await _rest(hub, run_id)
        await asyncio.to_thread(workers.close)
        log = hub.get(run_id)
        assert log is not None
        return log.kept_after((0, -1))

    try:
        live = asyncio.run(drive())
        run_id = live[0].data["run_id"]
        stored, resting = stored_events(store, run_id, lambda state: agent, (0, -1))
        assert resting
    finally:
        store.close()
    return live, stored


@pytest.mark.parametrize(
    ("world", "task", "decisions"),
    [
        (ledger_agent, task_for(["A-1", "A-2"]), []),
        (ledger_agent, task_for(["BIG-1", "A-2"]), [{"decision": "approve"}]),
        (ledger_agent, task_for(["BIG-1"]), [{"decision": "reject", "reason": "too much"}]),
        (ledger_agent, task_for(["BIG-2"]), [{"decision": "edit", "arguments": '{"invoice": "BIG-2", "cents": 7}'}]),
        (shop_agent, "order a shirt", [{"decision": "answer", "answer": {"size": "M"}}]),
        (shop_agent, "both, please", [{"decision": "reply", "reply": WHOLE}]),
    ],
    ids=["answered", "approved", "rejected", "edited", "answered-by-a-person", "reply-decided-whole"],
)
def test_the_events_derived_live_are_the_ones_the_store_gives_after(
    tmp_path: Path, world: Callable[[Path], Agent], task: str, decisions: list[dict[str, Any]]
) -> None:
    """Id for id and field for field, the live events of a run equal the store's, ordered, each id once."""
    live, stored = _drive(tmp_path, world, task, decisions)
    assert [(k.id, k.data) for k in live] == [(k.id, k.data) for k in stored]
    ids = [k.id for k in stored]
    assert ids == sorted(set(ids))
    kinds = [k.data["type"] for k in stored]
    assert kinds[-1] == "ended" and kinds.count("decided") == len(decisions)
    assert kinds.count("paused") == len(decisions)
    assert stored[-1].data["stop"] == "answered" or decisions[0]["decision"] == "reject"


def test_a_stream_resumed_at_any_event_from_the_store_gives_exactly_the_rest(tmp_path: Path) -> None:
    """From every event of a run paused and approved, the store's events after it are the rest, nothing repeated."""
    _, stored = _drive(tmp_path, ledger_agent, task_for(["BIG-1", "A-2"]), [{"decision": "approve"}])
    store = SqliteStore(tmp_path / "runs.db")
    try:
        run_id = stored[0].data["run_id"]
        agent = ledger_agent(tmp_path / "effects")
        for n, seen in enumerate(stored):
            after, _ = stored_events(store, run_id, lambda state: agent, seen.id)
            assert after == stored[n + 1 :]
    finally:
        store.close()


@pytest.mark.parametrize(("text", "place"), [("0", (0, -1)), ("3.2", (3, 2)), ("12.0", (12, 0))])
def test_an_event_id_names_its_checkpoint_and_index(text: str, place: tuple[int, int]) -> None:
    """``P.I`` is read as (P, I); ``0`` as before everything."""
    assert event_id(text) == place


@pytest.mark.parametrize("text", ["", "x", "3", "3.", ".2", "-1.0", "3.2.1", "1.0" + "0" * 50])
def test_anything_else_names_no_event(text: str) -> None:
    """Any other Last-Event-ID is no place (the API answers it with a 422)."""
    assert event_id(text) is None


def test_a_run_taken_over_streams_as_it_goes_and_as_the_store_says(tmp_path: Path) -> None:
    """A run left running (its process gone) is swept up: its events are heard live, the same as the store's."""
    agent = ledger_agent(tmp_path / "effects")
    store = SqliteStore(tmp_path / "runs.db")
    state = agent.start(task_for(["A-1", "BIG-1"]), run_id="left.1")
    store.begin("left.1", state)

    async def sweep() -> list[Kept]:
        hub = Hub(asyncio.get_running_loop())
        workers = Workers(store, hub, size=2)
        taken = await asyncio.to_thread(workers.sweep, {"ledger": agent}, older_than=0)
        assert taken == ["left.1"]
        assert (await _rest(hub, "left.1"))["stop"] == "awaiting_approval"
        await asyncio.to_thread(workers.close)
        log = hub.get("left.1")
        assert log is not None
        return log.kept_after((0, -1))

    try:
        live = asyncio.run(sweep())
        stored, resting = stored_events(store, "left.1", lambda state: agent, (0, -1))
    finally:
        store.close()
    assert resting and live == stored and [k.data["type"] for k in live][-2:] == ["paused", "ended"]


def test_a_run_a_bug_stopped_ends_its_stream_with_the_stored_error(tmp_path: Path) -> None:
    """
    A gate's bug: the live stream and the store's end with the same ``failed`` event, its error as stored, placed
    after the stretch the bug stopped; that stretch, never committed, was said live only.
    """
    live, stored = _drive(tmp_path, lambda path: ledger_agent(path, gate=_truthy_gate), task_for(["A-1"]), [])
    assert [k.data["type"] for k in live] == ["model_replied", "proposed", "failed"]
    assert [k.id for k in live] == [(1, 0), (1, 1), (2, 0)]
    assert stored == live[-1:] and stored[0].data["error"].startswith("GateError: ")


def test_a_run_let_go_here_ends_its_numbered_stream_instead_of_hanging(tmp_path: Path) -> None:
    """
    A model's bug the store does not record as failed (the run stays ``running``, left to a takeover): the
    numbered log AG-UI and A2A follow ends with an ``interrupted`` record, not keep-alives forever.
    """
    from agent_fsm import ScriptedModel

    agent = Agent(ScriptedModel([]), {}, name="empty")
    store = SqliteStore(tmp_path / "runs.db")

    async def follow() -> list[dict[str, Any]]:
        hub = Hub(asyncio.get_running_loop())
        workers = Workers(store, hub, size=1)
        run_id = await asyncio.to_thread(workers.start, agent, "Go.", client="ui")
        log = hub.open(run_id)

        async def records() -> list[dict[str, Any]]:
            return [record.data async for record in log.follow(0, keepalive=0.2) if record is not None]

        try:
            return await asyncio.wait_for(records(), 10)
        finally:
            await asyncio.to_thread(workers.close)

    try:
        said = asyncio.run(follow())
        (summary,) = store.runs()
    finally:
        store.close()
    assert summary.status == "running"  # left for a process to take over, as before
    assert said[-1]["type"] == "failed" and said[-1]["code"] == "interrupted"
    assert "ScriptExhausted" in said[-1]["error"]
