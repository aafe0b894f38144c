"""Forking a stored run from an earlier checkpoint, on SQLite on disk and a real PostgreSQL server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from agent_fsm import Verdict
from agent_fsm.engine import ToolCall
from agent_fsm.store import (
    DamagedRun,
    RunExists,
    RunNotFound,
    RunStore,
    approve,
    fork,
    reject,
)
from tests.ledger_world import ledger_agent, read_ledger, task_for

Opener = Callable[[], RunStore]

# A pays, its receipt goes out, BIG-1's payment waits for a person.
TASK = task_for(["A", "BIG-1"])


def _paused_parent(opener: Opener, ledger: Path) -> RunStore:
    store = opener()
    result = ledger_agent(ledger).run(TASK, store=store, run_id="parent")
    assert result.stop.value == "awaiting_approval"
    return store


def _pays(ledger: Path, run_id: str) -> list[str]:
    paid = [e for e in read_ledger(ledger) if e["event"] == "effect" and e["tool"] == "pay"]
    return [e["args"]["invoice"] for e in paid if e["run"] == run_id]


def test_every_commit_without_an_effect_in_flight_is_a_numbered_checkpoint(opener: Opener, tmp_path: Path) -> None:
    """As begun, after each effect's observation, at the pause: 0, 1, 2, 3, each with the state it had."""
    store = _paused_parent(opener, tmp_path / "ledger")
    points = opener().checkpoints("parent")
    assert [(c.point, c.machine_state, c.stop) for c in points] == [
        (0, "Ready", None),
        (1, "Executing", None),
        (2, "Executing", None),
        (3, "AwaitingApproval", "awaiting_approval"),
    ]
    assert [len(opener().checkpoint("parent", c.point).observations) for c in points] == [0, 2, 3, 4]
    assert opener().checkpoint("parent", 3) == store.load("parent").state
    assert all(a.saved_at <= b.saved_at for a, b in zip(points, points[1:], strict=False))


def test_a_fork_at_a_pause_is_decided_apart_from_its_parent(opener: Opener, tmp_path: Path) -> None:
    """One pause, two decisions: the parent's rejection and the fork's approval each run (or not) in their own run."""
    ledger = tmp_path / "ledger"
    _paused_parent(opener, ledger)
    forked = fork(opener(), "parent", at=3, new_run_id="child")
    parent = opener().load("parent")
    assert forked.status == "paused" and forked.summary.pause_id == "child.1" != parent.summary.pause_id
    assert forked.summary.blocked == parent.summary.blocked and forked.summary.reason == parent.summary.reason
    assert {s.run_id for s in opener().paused()} == {"parent", "child"}
    rejected = reject(opener(), "parent", ledger_agent(ledger), reviewer="ana", reason="not this month")
    approved = approve(opener(), "child", ledger_agent(ledger), reviewer="bo")
    assert (rejected.stop.value, approved.stop.value) == ("answered", "answered")
    assert _pays(ledger, "parent") == ["A"]
    assert _pays(ledger, "child") == ["BIG-1"]  # A was paid by the parent; the fork does not pay it again
    keys = [e["key"] for e in read_ledger(ledger) if e["event"] == "effect"]
    # The parent: A, A's receipt, BIG-1's receipt; the fork: BIG-1 and its receipt. Each under a key of its own run.
    assert len(keys) == len(set(keys)) == 5
    record = opener().forked_from("child")
    assert record is not None and (record.parent, record.point) == ("parent", 3)
    assert opener().forked_from("parent") is None
    assert [f.run_id for f in opener().forks("parent")] == ["child"]


def test_a_fork_goes_on_with_another_gate_that_judges_afresh(opener: Opener, tmp_path: Path) -> None:
    """Forked after A's payment, run by an agent whose gate denies payments: nothing the parent allowed carries over."""
    ledger = tmp_path / "ledger"
    _paused_parent(opener, ledger)
    store = opener()
    forked = fork(store, "parent", at=1, new_run_id="strict")
    assert forked.status == "running" and forked.state.machine_state == "Executing"

    def no_payments(call: ToolCall) -> Verdict:
        return Verdict.deny("payments are frozen") if call.name == "pay" else Verdict.allow("not a payment")

    result = ledger_agent(ledger, gate=no_payments).advance(forked.state, store=store, run_id="strict")
    assert result.stop.value in ("answered", "no_progress")
    assert _pays(ledger, "strict") == []  # the receipt of A and nothing else ran in the fork
    sent = [e for e in read_ledger(ledger) if e["event"] == "effect" and e["run"] == "strict"]
    assert [e["tool"] for e in sent] == ["send_receipt"] * len(sent)
    denied = [o for o in result.state.observations if o.kind == "denied"]
    assert denied and all("payments are frozen" in str(o.content) for o in denied)
    assert opener().load("strict").state == result.state
    assert opener().checkpoints("strict")[0].point == 0


def test_a_pause_approved_in_the_fork_is_still_judged_by_the_deciding_gate(opener: Opener, tmp_path: Path) -> None:
    """Approving a forked pause under a gate that now denies the call runs nothing: a saved state is not authority."""
    ledger = tmp_path / "ledger"
    _paused_parent(opener, ledger)
    fork(opener(), "parent", at=3, new_run_id="child")

    def deny_big(call: ToolCall) -> Verdict:
        big = call.name == "pay" and str((call.arguments or {}).get("invoice")).startswith("BIG")
        return Verdict.deny("no large payments") if big else Verdict.allow("fine")

    result = approve(opener(), "child", ledger_agent(ledger, gate=deny_big), reviewer="ana")
    assert "BIG-1" not in _pays(ledger, "child")
    assert any(o.kind == "denied" and "no large payments" in str(o.content) for o in result.state.observations)


def test_a_fork_from_the_beginning_runs_the_task_again_as_a_new_run(opener: Opener, tmp_path: Path) -> None:
    """Checkpoint 0 is the run as begun: the fork replays the whole task with its own keys."""
    ledger = tmp_path / "ledger"
    _paused_parent(opener, ledger)
    store = opener()
    forked = fork(store, "parent", at=0, new_run_id="again")
    assert forked.state.observations == [] and forked.state.messages == opener().checkpoint("parent", 0).messages
    result = ledger_agent(ledger).advance(forked.state, store=store, run_id="again")
    assert result.stop.value == "awaiting_approval" and _pays(ledger, "again") == ["A"]


def test_a_fork_is_refused_clearly_and_writes_nothing(opener: Opener, tmp_path: Path) -> None:
    """An unknown run or point, an ending, a taken id, a bad point: typed refusals; no run is begun."""
    ledger = tmp_path / "ledger"
    _paused_parent(opener, ledger)
    store = opener()
    reject(store, "parent", ledger_agent(ledger), reviewer="ana", reason="no")
    last = store.checkpoints("parent")[-1]
    assert last.stop == "answered"
    with pytest.raises(ValueError, match=f"checkpoint {last.point} of run 'parent' is its ending"):
        fork(store, "parent", at=last.point, new_run_id="x")
    with pytest.raises(RunNotFound, match="has no checkpoint 99"):
        fork(store, "parent", at=99, new_run_id="x")
    with pytest.raises(RunNotFound, match="no run is stored under 'ghost'"):
        fork(store, "ghost", at=0, new_run_id="x")
    with pytest.raises(ValueError, match="numbered 0, 1, 2"):
        fork(store, "parent", at=-1, new_run_id="x")
    with pytest.raises(ValueError, match="numbered 0, 1, 2"):
        fork(store, "parent", at=True, new_run_id="x")
    with pytest.raises(ValueError, match="an id a database can hold"):
        fork(store, "parent", at=0, new_run_id="bad\x00id")
    with pytest.raises(RunExists, match="'parent'"):
        fork(store, "parent", at=0, new_run_id="parent")
    assert [s.run_id for s in store.runs()] == ["parent"]
    assert store.forks("parent") == []


def test_a_checkpoint_written_by_something_else_is_refused(opener: Opener, tmp_path: Path) -> None:
    """Another run's state, or no state at all, in a checkpoint row: DamagedRun, and no fork is begun."""
    ledger = tmp_path / "ledger"
    _paused_parent(opener, ledger)
    store = opener()
    other = json.loads(store.checkpoint("parent", 0).to_json())
    other["run_id"] = "someone-else"
    with store._transaction() as tx:  # type: ignore[attr-defined]
        tx.run("UPDATE agent_fsm_checkpoints SET state = ? WHERE point = 0", (json.dumps(other),))
        tx.run("UPDATE agent_fsm_checkpoints SET state = ? WHERE point = 1", ("{not json",))
    with pytest.raises(DamagedRun, match="is run 'someone-else'"):
        fork(store, "parent", at=0, new_run_id="x")
    with pytest.raises(DamagedRun, match="checkpoint 1 of run 'parent' cannot be read"):
        fork(store, "parent", at=1, new_run_id="x")
    assert [s.run_id for s in store.runs()] == ["parent"]


def test_a_fork_that_cannot_be_read_back_leaves_no_row(
    opener: Opener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new row is read back inside the fork's transaction: a failure there rolls the whole fork back."""
    import agent_fsm.store.sql as sql_module

    _paused_parent(opener, tmp_path / "ledger")

    def unreadable(row: object) -> object:
        raise DamagedRun("the forked row cannot be read (injected)")

    with monkeypatch.context() as patch:
        patch.setattr(sql_module, "stored_of", unreadable)
        with pytest.raises(DamagedRun, match="injected"):
            fork(opener(), "parent", at=3, new_run_id="child")
    with pytest.raises(RunNotFound):
        opener().load("child")
    assert opener().forks("parent") == []
    assert fork(opener(), "parent", at=3, new_run_id="child").summary.run_id == "child"  # the id is still free


def test_a_checkpoint_number_no_database_holds_is_a_value_error(opener: Opener, tmp_path: Path) -> None:
    """``at`` past a 64-bit integer is a ValueError naming the range, never the driver's OverflowError."""
    _paused_parent(opener, tmp_path / "ledger")
    store = opener()
    for at in (2**63, 10**30):
        with pytest.raises(ValueError, match=r"numbered 0, 1, 2 \.\.\. up to 2\*\*63-1"):
            fork(store, "parent", at=at, new_run_id="x")
        with pytest.raises(ValueError, match=r"up to 2\*\*63-1"):
            store.checkpoint("parent", at)
    assert [s.run_id for s in store.runs()] == ["parent"]


def test_a_fork_keys_its_calls_with_a_nonce_of_its_own(opener: Opener, tmp_path: Path) -> None:
    """A fork is a new run: its nonce (and so every idempotency key) is not its parent's, nor a nested run's."""
    store = opener()
    ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=store, run_id="r")
    parent = store.load("r").state
    forked = fork(store, "r", at=1, new_run_id="f").state
    assert forked.nonce and forked.nonce != parent.nonce
    assert store.load("f").state.nonce == forked.nonce  # kept in the store
