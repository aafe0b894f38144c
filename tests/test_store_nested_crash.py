"""
SIGKILL inside a nested run, then recovery from the store (SQLite on disk, a real PostgreSQL server).

A worker process runs the triage agent, whose refunds agent runs as a tool,
and dies by SIGKILL at a chosen moment: inside the refunds agent's handler
between the intent and the observation (before or after the money moved),
in a handler after a person approved the call, just after the refunds agent
paused but before the triage agent did, or once both rest paused. Then
``recover`` settles the run at the level the crash hit, and a person decides
what is left. A refund (not idempotent) never happens twice; a notice
(idempotent) runs again under its one key.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from agent_fsm import Agent
from agent_fsm.engine import RunState
from agent_fsm.store import OUTCOME_UNKNOWN, RunStore, approve, open_store, recover, reject
from tests.ledger_world import read_ledger
from tests.nested_ledger_world import desk_agent, effects, triage_agent, triage_task

_FORK = multiprocessing.get_context("fork")  # the worker starts in milliseconds with the test's imports


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL for each backend, on a database of its own."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


def _child_paused_alone(state: RunState) -> bool:
    child = state.children.get("t0") if state.children else None
    return state.machine_state == "Executing" and child is not None and child.machine_state == "AwaitingApproval"


def _agent(ledger: Path, deep: bool = False, **crash: Any) -> Agent:
    return desk_agent(ledger, **crash) if deep else triage_agent(ledger, **crash)


def _worker(url: str, ledger: str, amount: int, die: str | None, approved: bool, then: str | None, deep: bool) -> None:
    store = open_store(url)
    if then == "child-paused":  # killed after the child's pause is committed, before its parent's is
        commit = store.save

        def save(run_id: str, state: RunState, intent: Any = None) -> None:
            commit(run_id, state, intent)
            if _child_paused_alone(state):
                os.kill(os.getpid(), signal.SIGKILL)

        store.save = save  # type: ignore[method-assign]
    agent = _agent(Path(ledger), deep, die=die, token="w")
    agent.run(triage_task("O-1", amount), store=store, run_id="t1")
    if approved:
        approve(store, "t1", agent, reviewer="ana")
    if then == "paused":
        os.kill(os.getpid(), signal.SIGKILL)
    store.close()


def _killed(
    url: str,
    ledger: Path,
    amount: int,
    *,
    die: str | None = None,
    approved: bool = False,
    then: str | None = None,
    deep: bool = False,
) -> None:
    worker = _FORK.Process(target=_worker, args=(url, str(ledger), amount, die, approved, then, deep))
    worker.start()
    worker.join(60)
    assert worker.exitcode == -signal.SIGKILL, f"the worker was to be killed (exit code {worker.exitcode})"


def _outcome_unknown(store: RunStore) -> None:
    """The run waits on the refunds agent's refund, outcome unknown, at the level it was interrupted."""
    [waiting] = store.paused()
    assert waiting.blocked is not None and waiting.blocked.name == "refund"
    assert waiting.blocked_path == ("t0", "r1") and (waiting.reason or "").startswith(OUTCOME_UNKNOWN)
    state = store.load("t1").state
    assert state.pending[0].call_id == "t0" and state.children["t0"].pending[0].call_id == "r1"
    assert [e.outcome for e in store.effects("t1") if e.call_id == "t0/r1"][-1] == "interrupted"


@pytest.mark.parametrize("approved", [False, True], ids=["small", "approved"])
def test_killed_before_the_refund_a_person_approves_and_it_runs_once(
    store_url: str, tmp_path: Path, approved: bool
) -> None:
    """Intent committed, money not moved: recovery asks a person; approving runs it once, under the same key."""
    ledger = tmp_path / "ledger"
    _killed(store_url, ledger, 900 if approved else 300, die="before:refund", approved=approved)
    store = open_store(store_url)
    [recovered] = recover(store, triage_agent(ledger), older_than=0)
    assert recovered.error is None and recovered.interrupted == "t0/r1"
    assert recovered.result is not None and recovered.result.blocked_path == ("t0", "r1")
    _outcome_unknown(store)
    assert effects(ledger, "refund") == []  # the person checks the world: nothing was refunded
    result = approve(store, "t1", triage_agent(ledger), reviewer="ana")
    assert result.stop.value == "answered"
    [started, *_] = [e for e in read_ledger(ledger) if e["event"] == "start" and e["tool"] == "refund"]
    [refund] = effects(ledger, "refund")
    assert refund["key"] == started["key"]
    assert store.load("t1").status == "ended"


def test_killed_after_the_refund_a_person_rejects_and_it_never_runs_again(store_url: str, tmp_path: Path) -> None:
    """Money moved, observation lost: a person sees it in the world and rejects; the refund stays at one."""
    ledger = tmp_path / "ledger"
    _killed(store_url, ledger, 300, die="after:refund")
    store = open_store(store_url)
    [recovered] = recover(store, triage_agent(ledger), older_than=0)
    assert recovered.interrupted == "t0/r1"
    _outcome_unknown(store)
    assert len(effects(ledger, "refund")) == 1
    result = reject(store, "t1", triage_agent(ledger), reviewer="ana", reason="it was refunded")
    assert result.stop.value == "answered"
    child = store.load("t1").state.children["t0"]
    assert "recorded as not run" in str(child.observations[-1].content)
    assert len(effects(ledger, "refund")) == 1


def test_an_interrupted_notice_is_sent_again_under_its_key(store_url: str, tmp_path: Path) -> None:
    """The idempotent notice is re-judged by the refunds gate and run again, same key; no person is asked."""
    ledger = tmp_path / "ledger"
    _killed(store_url, ledger, 300, die="after:notify")
    store = open_store(store_url)
    [recovered] = recover(store, triage_agent(ledger), older_than=0)
    assert recovered.interrupted == "t0/r2"
    assert recovered.result is not None and recovered.result.stop.value == "answered"
    notices = effects(ledger, "notify")
    assert len(notices) == 2 and len({e["key"] for e in notices}) == 1
    assert len(effects(ledger, "refund")) == 1
    assert [e.outcome for e in store.effects("t1")] == ["result", "interrupted", "result"]


def test_killed_between_the_childs_pause_and_the_parents_the_run_pauses_again(store_url: str, tmp_path: Path) -> None:
    """The child's pause was committed, its parent's not: recovery pauses the parent on it; one approval runs it."""
    ledger = tmp_path / "ledger"
    _killed(store_url, ledger, 900, then="child-paused")
    store = open_store(store_url)
    assert store.load("t1").status == "running"
    [recovered] = recover(store, triage_agent(ledger), older_than=0)
    assert recovered.interrupted is None and recovered.result is not None
    assert recovered.result.stop.value == "awaiting_approval" and recovered.result.blocked_path == ("t0", "r1")
    [waiting] = store.paused()
    assert waiting.blocked is not None and waiting.blocked.name == "refund"
    assert waiting.reason == "refunds above 500 EUR need a person's approval"
    result = approve(store, "t1", triage_agent(ledger), reviewer="ana")
    assert result.stop.value == "answered" and len(effects(ledger, "refund")) == 1


def test_killed_while_paused_nothing_is_recovered_and_the_pause_is_decided(store_url: str, tmp_path: Path) -> None:
    """A paused run is at rest: recovery leaves it; a person decides it from another process."""
    ledger = tmp_path / "ledger"
    _killed(store_url, ledger, 900, then="paused")
    store = open_store(store_url)
    assert recover(store, triage_agent(ledger), older_than=0) == []
    result = approve(store, "t1", triage_agent(ledger), reviewer="ana")
    assert result.stop.value == "answered" and len(effects(ledger, "refund")) == 1


def test_killed_two_levels_down_recovery_settles_it_there(store_url: str, tmp_path: Path) -> None:
    """A refund interrupted two nestings down pauses there, outcome unknown; each run above pauses on it."""
    ledger = tmp_path / "ledger"
    _killed(store_url, ledger, 300, die="before:refund", deep=True)
    store = open_store(store_url)
    [recovered] = recover(store, desk_agent(ledger), older_than=0)
    assert recovered.interrupted == "d0/t0/r1" and recovered.result is not None
    assert recovered.result.blocked_path == ("d0", "t0", "r1")
    [waiting] = store.paused()
    assert waiting.blocked_path == ("d0", "t0", "r1") and (waiting.reason or "").startswith(OUTCOME_UNKNOWN)
    state = store.load("t1").state
    assert [state.machine_state, state.children["d0"].machine_state] == ["AwaitingApproval", "AwaitingApproval"]
    assert effects(ledger, "refund") == []
    assert approve(store, "t1", desk_agent(ledger), reviewer="ana").stop.value == "answered"
    assert len(effects(ledger, "refund")) == 1
