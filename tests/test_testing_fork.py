"""A real run, recorded and stored, played again from one of its checkpoints: ReplayModel(start=...) and fork."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_fsm import Agent, Verdict
from agent_fsm.store import SqliteStore, fork
from agent_fsm.testing import RecordingModel, ReplayModel
from tests.test_testing_cassettes import LiveModel, allow, make_pantry

TASK = "Order six eggs."


def _recorded(tmp_path: Path) -> tuple[SqliteStore, Path]:
    store, cassette = SqliteStore(tmp_path / "runs.db"), tmp_path / "eggs.json"
    live = Agent(RecordingModel(LiveModel(), cassette), make_pantry(), gate=allow).run(TASK, store=store, run_id="live")
    assert live.stop.value == "answered"
    return store, cassette


def test_a_fork_after_the_effect_replays_the_rest_of_the_recording(tmp_path: Path) -> None:
    """Forked after the order was observed, the replay serves the recorded reply that came next, checked strictly."""
    store, cassette = _recorded(tmp_path)
    points = store.checkpoints("live")
    assert [p.machine_state for p in points] == ["Ready", "Executing", "Answered"]
    forked = fork(store, "live", at=1, new_run_id="again")
    replay = ReplayModel(cassette, start=forked.state.turns)
    done = Agent(replay, make_pantry(), gate=allow).advance(forked.state, store=store, run_id="again")
    assert done.stop.value == "answered" and replay.used == 2
    recorded = store.load("live").state.messages
    assert done.state.messages[:-1] == recorded[:-1]  # the parent's record, then the recorded (redacted) answer
    assert done.state.messages[-1]["content"] == "Ordered. (debug: key=[REDACTED])" != recorded[-1]["content"]


def test_a_fork_from_the_start_under_another_gate_moves_away_from_the_recording(tmp_path: Path) -> None:
    """The same replies under a gate that denies orders: no order runs, and a strict replay says where it differs."""
    store, cassette = _recorded(tmp_path)
    ordered: list[int] = []
    tools = make_pantry()
    spec = tools["order"]
    tools["order"] = type(spec)(spec.description, spec.json_schema, lambda item, count: ordered.append(count))

    def no_orders(call: object) -> Verdict:
        return Verdict.deny("the pantry is closed")

    begun = fork(store, "live", at=0, new_run_id="closed")
    lenient = Agent(ReplayModel(cassette, strict=False), tools, gate=no_orders)
    result = lenient.advance(begun.state, store=store, run_id="closed")
    assert ordered == [] and result.state.observations[0].kind == "denied"
    with pytest.raises(ValueError, match="start must be a reply number from 0 to 2"):
        ReplayModel(cassette, start=3)
