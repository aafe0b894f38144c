"""A run with an agent nested in it, kept in a store (SQLite on disk, a real PostgreSQL server): pause, decide, show."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_fsm.cli import app
from agent_fsm.store import AlreadyDecided, RunStore, SqliteStore, StoreError, approve, fork, reject
from tests.nested_ledger_world import desk_agent, effects, triage_agent, triage_task

Opener = Callable[[], RunStore]


def _paused(opener: Opener, ledger: Path, run_id: str = "t1", amount: int = 900) -> None:
    result = triage_agent(ledger).run(triage_task("O-1", amount), store=opener(), run_id=run_id)
    assert result.stop.value == "awaiting_approval" and result.blocked_path == ("t0", "r1")


def test_a_nested_pause_is_stored_with_the_innermost_call(opener: Opener, tmp_path: Path) -> None:
    """The inbox shows the refunds agent's refund (not the delegation), its path and its own gate's reason."""
    _paused(opener, tmp_path / "ledger")
    [waiting] = opener().paused()
    assert waiting.run_id == "t1" and waiting.blocked is not None
    assert (waiting.blocked.name, waiting.blocked.call_id) == ("refund", "r1")
    assert waiting.blocked.arguments == {"order": "O-1", "amount": 900}
    assert waiting.blocked_path == ("t0", "r1")
    assert waiting.reason == "refunds above 500 EUR need a person's approval"
    stored = opener().load("t1")
    child = stored.state.children["t0"]
    assert (child.run_id, child.agent, child.machine_state) == ("t1/t0", "refunds", "AwaitingApproval")
    assert stored.intent is None and opener().effects("t1") == []
    assert effects(tmp_path / "ledger") == []


def test_approving_at_the_top_resumes_the_child_then_the_parent_once(opener: Opener, tmp_path: Path) -> None:
    """Another store object and a fresh agent approve: the refund runs once, the effects table records it."""
    ledger = tmp_path / "ledger"
    _paused(opener, ledger)
    result = approve(opener(), "t1", triage_agent(ledger), reviewer="ana")
    assert result.stop.value == "answered" and "Refunded 900 EUR on O-1." in (result.answer or "")
    [refund] = effects(ledger, "refund")
    assert refund["run"] == "t1/t0" and refund["args"] == {"order": "O-1", "amount": 900}
    recorded = {e.call_id: e for e in opener().effects("t1")}
    assert set(recorded) == {"t0/r1", "t0/r2"}
    assert recorded["t0/r1"].outcome == "result" and recorded["t0/r1"].idempotency_key == refund["key"]
    assert recorded["t0/r2"].outcome == "result"
    stored = opener().load("t1")
    assert stored.status == "ended" and stored.state.children["t0"].machine_state == "Answered"
    assert [d.decision for d in opener().history("t1")] == ["approve"]
    with pytest.raises(AlreadyDecided):
        approve(opener(), "t1", triage_agent(ledger), reviewer="bo")
    assert len(effects(ledger, "refund")) == 1


def test_rejecting_at_the_top_tells_the_refunds_agent(opener: Opener, tmp_path: Path) -> None:
    """A rejection goes down to the refunds agent, which answers without refunding; nothing moved."""
    ledger = tmp_path / "ledger"
    _paused(opener, ledger)
    result = reject(opener(), "t1", triage_agent(ledger), reviewer="ana", reason="too much")
    assert result.stop.value == "answered" and "not made" in (result.answer or "")
    assert effects(ledger) == [] and opener().effects("t1") == []
    child = opener().load("t1").state.children["t0"]
    assert child.observations[-1].kind == "denied" and "too much" in str(child.observations[-1].content)


def test_an_edit_is_of_the_nested_call_under_the_nested_contract(opener: Opener, tmp_path: Path) -> None:
    """The reviewer edits the refund itself; the refunds agent's contract judges it (a bad edit decides nothing)."""
    ledger = tmp_path / "ledger"
    _paused(opener, ledger)
    with pytest.raises(ValueError, match="invalid"):
        approve(opener(), "t1", triage_agent(ledger), reviewer="ana", arguments={"order": "O-1", "amount": "lots"})
    assert opener().load("t1").status == "paused" and opener().history("t1") == []
    result = approve(opener(), "t1", triage_agent(ledger), reviewer="ana", arguments={"order": "O-1", "amount": 400})
    assert result.stop.value == "answered"
    assert [e["args"]["amount"] for e in effects(ledger, "refund")] == [400]


def test_a_row_naming_the_delegation_instead_of_the_nested_call_is_refused(opener: Opener, tmp_path: Path) -> None:
    """The row's blocked call must be the innermost call the state waits on, or nothing is decided."""
    ledger = tmp_path / "ledger"
    _paused(opener, ledger)
    store = opener()
    with store._transaction() as tx:  # type: ignore[attr-defined]
        tx.run(
            "UPDATE agent_fsm_runs SET blocked = ? WHERE run_id = ?",
            ('{"call_id": "t0", "name": "refunds", "arguments": {"task": "x"}}', "t1"),
        )
    with pytest.raises(StoreError, match="t1"):
        approve(opener(), "t1", triage_agent(ledger), reviewer="ana")
    assert effects(ledger) == [] and opener().load("t1").status == "paused"


def test_the_cli_shows_the_tree_of_runs(tmp_path: Path) -> None:
    """``runs list`` addresses the nested call as RUN/CALL/CALL; ``runs show`` draws the tree of runs."""
    ledger = tmp_path / "ledger"
    _paused(lambda: SqliteStore(tmp_path / "runs.db"), ledger)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    listed = CliRunner().invoke(app, ["runs", "list", "--store", url])
    assert listed.exit_code == 0
    assert 'pause t1.1: refund {"order": "O-1", "amount": 900} (call t1/t0/r1)' in listed.stdout
    shown = CliRunner().invoke(app, ["runs", "show", "t1", "--store", url])
    assert shown.exit_code == 0
    assert "runs:\n  t1  triage  AwaitingApproval  blocked: refund t1/t0/r1\n" in shown.stdout
    assert "\n    t1/t0  refunds  AwaitingApproval  blocked: refund t1/t0/r1\n" in shown.stdout
    approve(SqliteStore(tmp_path / "runs.db"), "t1", triage_agent(ledger), reviewer="ana")
    shown = CliRunner().invoke(app, ["runs", "show", "t1", "--store", url]).stdout
    assert "  t1  triage  Answered\n    t1/t0  refunds  Answered\n" in shown
    assert "effect: refund t1/t0/r1 key " in shown and "effect: notify t1/t0/r2 key " in shown


def test_a_fork_of_a_nested_pause_is_a_new_run_tree(opener: Opener, tmp_path: Path) -> None:
    """Forked at the pause, the nested run is renamed with its parent: its own pause, its own keys, its own refund."""
    ledger = tmp_path / "ledger"
    _paused(opener, ledger)
    [point] = [c.point for c in opener().checkpoints("t1") if c.stop == "awaiting_approval"]
    forked = fork(opener(), "t1", at=point, new_run_id="t1b")
    child = forked.state.children["t0"]
    assert (child.run_id, child.pause_id, forked.summary.blocked_path) == ("t1b/t0", "t1b/t0.1", ("t0", "r1"))
    approve(opener(), "t1", triage_agent(ledger), reviewer="ana")
    approve(opener(), "t1b", triage_agent(ledger), reviewer="bo")
    refunds = effects(ledger, "refund")
    assert [e["run"] for e in refunds] == ["t1/t0", "t1b/t0"] and refunds[0]["key"] != refunds[1]["key"]
    assert [e.idempotency_key for e in opener().effects("t1b") if e.call_id == "t0/r1"] == [refunds[1]["key"]]


def test_two_levels_down_the_pause_the_decision_and_the_effect_keep_their_path(opener: Opener, tmp_path: Path) -> None:
    """A refund two levels down: the inbox shows it with its path, one approval at the top runs it once."""
    ledger = tmp_path / "ledger"
    result = desk_agent(ledger).run(triage_task("O-1", 900), store=opener(), run_id="d1")
    assert result.blocked_path == ("d0", "t0", "r1")
    [waiting] = opener().paused()
    assert waiting.blocked is not None and (waiting.blocked.name, waiting.blocked_path) == (
        "refund",
        ("d0", "t0", "r1"),
    )
    assert waiting.reason == "refunds above 500 EUR need a person's approval"
    with pytest.raises(ValueError, match="invalid"):  # the edit is held to the refunds agent's contract
        approve(opener(), "d1", desk_agent(ledger), reviewer="ana", arguments={"order": "O-1", "amount": "lots"})
    done = approve(opener(), "d1", desk_agent(ledger), reviewer="ana", arguments={"order": "O-1", "amount": 800})
    assert done.stop.value == "answered" and [e["args"]["amount"] for e in effects(ledger, "refund")] == [800]
    assert [(e.call_id, e.outcome) for e in opener().effects("d1")] == [("d0/t0/r1", "result"), ("d0/t0/r2", "result")]
    grandchild = opener().load("d1").state.children["d0"].children["t0"]
    assert grandchild.run_id == "d1/d0/t0" and grandchild.machine_state == "Answered"


def test_the_async_driver_stores_the_nested_pause_the_same_way(tmp_path: Path) -> None:
    """``arun`` with a store commits the same tree; a decision taken later by the sync inbox goes on from it."""
    ledger, path = tmp_path / "ledger", tmp_path / "runs.db"
    result = asyncio.run(triage_agent(ledger).arun(triage_task("O-1", 900), store=SqliteStore(path), run_id="a1"))
    assert result.blocked_path == ("t0", "r1")
    [waiting] = SqliteStore(path).paused()
    assert waiting.blocked is not None and waiting.blocked.name == "refund" and waiting.blocked_path == ("t0", "r1")
    assert approve(SqliteStore(path), "a1", triage_agent(ledger), reviewer="ana").stop.value == "answered"
    assert len(effects(ledger, "refund")) == 1
    assert [e.outcome for e in SqliteStore(path).effects("a1")] == ["result", "result"]
