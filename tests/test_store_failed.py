"""A run whose gate or handler has a bug is recorded as failed in its store, never left ``running``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_fsm import Agent, GateError, HandlerError, ToolSpec
from agent_fsm.engine import ToolCall
from agent_fsm.store import RunStore, recover
from tests.cli_store import runs
from tests.ledger_world import LedgerModel, ledger_agent, ledger_tools, pay_gate, task_for

Opener = Callable[[], RunStore]
TASK = task_for(["A"])


def _truthy_gate(call: ToolCall) -> Any:
    return True  # a common slip: a bool where a Verdict is due


def test_a_gate_answering_true_leaves_the_run_failed_not_running(opener: Opener, tmp_path: Path) -> None:
    """GateError still reaches the caller with the state; the stored run is ``failed`` with the error, not claimable."""
    store = opener()
    with pytest.raises(GateError, match="Verdict") as caught:
        ledger_agent(tmp_path / "ledger", gate=_truthy_gate).run(TASK, store=store, run_id="t-1")
    assert caught.value.state is not None and caught.value.state.run_id == "t-1"
    summary = opener().load("t-1").summary
    assert (summary.status, summary.stop) == ("failed", None)
    assert summary.reason is not None and summary.reason.startswith("GateError: ") and "Verdict" in summary.reason
    assert [s.run_id for s in opener().runs("failed")] == ["t-1"] and opener().runs("running") == []
    assert recover(opener(), ledger_agent(tmp_path / "ledger"), older_than=0) == []  # a bug is not a crash


def test_a_handler_bug_is_recorded_failed_with_its_effect_left_in_flight(opener: Opener, tmp_path: Path) -> None:
    """A handler's bug: HandlerError reaches the caller; the run is failed, its effect left unsettled."""
    tools = ledger_tools(tmp_path / "ledger")

    def broken(invoice: str, cents: int) -> dict[str, Any]:
        raise AttributeError("'NoneType' object has no attribute 'charge'")

    tools["pay"] = ToolSpec("Pay an invoice.", {"invoice": str, "cents": int}, broken, effectful=True)
    store = opener()
    with pytest.raises(HandlerError, match="charge"):
        Agent(LedgerModel(), tools, gate=pay_gate).run(TASK, store=store, run_id="t-2")
    stored = opener().load("t-2")
    assert stored.status == "failed" and "AttributeError" in (stored.summary.reason or "")
    assert [(e.tool, e.outcome) for e in opener().effects("t-2")] == [("pay", None)]


def test_an_async_or_streamed_run_is_recorded_failed_too(opener: Opener, tmp_path: Path) -> None:
    """The async driver and the sync event stream record the same failure."""
    store = opener()
    agent = ledger_agent(tmp_path / "ledger", gate=_truthy_gate)
    with pytest.raises(GateError):
        asyncio.run(agent.arun(TASK, store=store, run_id="t-3"))
    with pytest.raises(GateError):
        list(agent.stream(TASK, store=store, run_id="t-6"))
    assert [opener().load(run_id).status for run_id in ("t-3", "t-6")] == ["failed", "failed"]


def test_runs_list_shows_a_failed_run_with_its_error(tmp_path: Path) -> None:
    """``agent-fsm runs list`` shows the failed run and the error in its line."""
    from agent_fsm.store import SqliteStore

    with pytest.raises(GateError):
        ledger_agent(tmp_path / "ledger", gate=_truthy_gate).run(
            TASK, store=SqliteStore(tmp_path / "runs.db"), run_id="t-4"
        )
    code, out, _ = runs("list", "--store", f"sqlite:///{tmp_path / 'runs.db'}", "--status", "failed")
    assert code == 0 and out.startswith("t-4  failed ")
    assert "\n    error: GateError: " in out


def test_a_recovery_that_meets_the_bug_records_it_failed(opener: Opener, tmp_path: Path) -> None:
    """A crashed run recovered by an agent whose gate answers True: reported, recorded failed, not claimed again."""
    store = opener()
    agent = ledger_agent(tmp_path / "ledger")
    state = agent.start(TASK, run_id="t-5")
    store.begin("t-5", state)
    store.save("t-5", state)  # as a process that died after its first commit left it
    (done,) = recover(opener(), ledger_agent(tmp_path / "ledger", gate=_truthy_gate), older_than=0)
    assert done.error is not None and done.error.startswith("GateError: ")
    assert opener().load("t-5").status == "failed"
    assert recover(opener(), agent, older_than=0) == []
