"""``agent-fsm runs``: list, show, approve, reject, recover and export against a real SQLite store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_fsm import RunState
from agent_fsm.cli import app
from agent_fsm.examples.demo import TASK
from agent_fsm.examples.durable import world
from agent_fsm.store import SqliteStore
from tests.cli_store import WORLD, runs

runner = CliRunner()


def test_list_shows_the_pause_with_its_call_and_reason(paused: str) -> None:
    """The inbox line names the run, its pause id, the blocked call's arguments and the gate's reason."""
    code, out, _ = runs("list", "--store", paused)
    assert code == 0
    assert out.startswith("ticket-1  paused   awaiting_approval")
    assert 'refund_order {"order_id": "A-17", "amount_cents": 9999}' in out
    assert "reason: refunds above 5000 cents need a person's approval" in out
    assert runs("list", "--store", paused, "--status", "ended")[1] == "no runs ended\n"


def test_approve_from_another_process_then_a_second_decision_fails(paused: str, tmp_path: Path) -> None:
    """A separate ``agent-fsm`` process approves an edited refund; deciding again exits 1 with the reason."""
    command = [sys.executable, "-m", "agent_fsm.cli", "runs", "approve", "ticket-1", "--store", paused]
    command += ["--world", WORLD, "--reviewer", "ana", "--arguments", '{"order_id": "A-17", "amount_cents": 4999}']
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ticket-1: answered"
    assert [r["refunded_cents"] for r in map(json.loads, (tmp_path / "refunds.jsonl").read_text().splitlines())] == [
        4999
    ]
    code, _, err = runs("approve", "ticket-1", "--store", paused, "--world", WORLD, "--reviewer", "bo")
    assert code == 1 and "ticket-1" in err and "not waiting for a decision" in err


def test_show_prints_transcript_path_effects_and_decisions(paused: str) -> None:
    """After a rejection, ``show`` has the transcript, the path, each effect and the reviewer's decision."""
    code, out, _ = runs(
        "reject", "ticket-1", "--store", paused, "--world", WORLD, "--reviewer", "ana", "--reason", "no"
    )
    assert code == 0 and out.strip() == "ticket-1: answered"
    code, out, _ = runs("show", "ticket-1", "--store", paused, "--diagram")
    assert code == 0
    assert "rejected by a human reviewer: no" in out
    assert "path: Proposing -> Executing -> Ready -> Proposing -> AwaitingApproval -> Denied" in out
    assert "effect: refund_order call_3 key " in out and ": result" in out
    assert "decision: reject by ana at " in out and "(no)" in out
    assert "stateDiagram-v2" in out


def test_show_draws_the_agents_machine_when_the_world_is_named(paused: str) -> None:
    """With ``--world`` the diagram is that agent's machine with the run's path; ``--full`` draws the whole table."""
    code, out, _ = runs("show", "ticket-1", "--store", paused, "--diagram", "--world", WORLD)
    assert code == 0, out
    drawn = out[out.index("stateDiagram-v2") :]
    assert "AwaitingApproval" in drawn and "Proposing" in drawn
    assert "ScreeningInput" not in drawn and "Compacting" not in drawn
    code, out, _ = runs("show", "ticket-1", "--store", paused, "--diagram", "--world", WORLD, "--full")
    assert code == 0 and "ScreeningInput" in out[out.index("stateDiagram-v2") :]
    code, _, err = runs("show", "ticket-1", "--store", paused, "--full")
    assert code != 0 and "--full" in err


def test_export_writes_what_diagram_trace_reads(paused: str, tmp_path: Path) -> None:
    """The exported file is the stored state, and ``agent-fsm diagram --trace`` draws its path."""
    target = tmp_path / "t.json"
    assert runs("export", "ticket-1", "--store", paused, "-o", str(target))[0] == 0
    assert RunState.from_json(target.read_text()) == SqliteStore(paused[len("sqlite:///") :]).load("ticket-1").state
    drawn = runner.invoke(app, ["diagram", "--trace", str(target)])
    assert drawn.exit_code == 0 and "AwaitingApproval" in drawn.stdout


def test_recover_reports_each_run_and_an_unknown_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed inside its refund is recovered to an "outcome unknown" pause, reported as it goes."""
    monkeypatch.setenv("AGENT_FSM_REFUNDS", str(tmp_path / "refunds.jsonl"))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    crashed = subprocess.run(
        [sys.executable, "-m", "agent_fsm.examples.durable", "crash", "t2", "--store", url], timeout=120
    )
    assert crashed.returncode == -9
    code, out, _ = runs(
        "recover", "--store", url, "--world", "agent_fsm.examples.durable:direct_world", "--older-than", "0"
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "claiming runs with no commit for 0s ..."
    assert lines[1].startswith("  t2: awaiting_approval (outcome unknown: refund_order (call_2)")
    assert lines[-1] == "recovered 1 run(s)"


def test_bad_store_urls_and_worlds_fail_in_one_line(tmp_path: Path) -> None:
    """An unknown URL scheme, a missing run and a world that cannot load exit 1 or 2 with the reason."""
    code, _, err = runs("list", "--store", "mysql://x")
    assert code == 1 and "sqlite:///PATH" in err
    SqliteStore(tmp_path / "runs.db").close()
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    code, _, err = runs("show", "nope", "--store", url)
    assert code == 1 and "no run is stored under 'nope'" in err
    code, _, err = runs("recover", "--store", url, "--world", "no.such.module:world")
    assert code == 1 and "cannot load the world" in err
    assert runs("recover", "--store", url, "--world", "nocolon")[0] == 2


def test_a_decision_from_the_cli_keeps_the_runs_own_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A world that names no limits leaves the run's saved ones in force: the CLI never swaps in the defaults."""
    from agent_fsm import Limits

    monkeypatch.setenv("AGENT_FSM_REFUNDS", str(tmp_path / "refunds.jsonl"))
    store = SqliteStore(tmp_path / "runs.db")
    limits = Limits(max_turns=3, max_tool_calls=5)
    world().replace(limits=limits).run(TASK, store=store, run_id="ticket-2")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    code, _, err = runs("reject", "ticket-2", "--store", url, "--world", WORLD, "--reviewer", "ana", "--reason", "no")
    assert code == 0, err
    assert SqliteStore(tmp_path / "runs.db").load("ticket-2").state.limits == limits


WORLDS = """
from agent_fsm.examples.durable import world

desk = world()                      # an Agent value
parts = lambda: {"model": desk.model, "tools": desk.tools, "gate": desk.gate}
number = 3


def per_ticket(ticket):
    return desk
"""


@pytest.fixture
def worlds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of worlds, right and wrong, importable as ``user_worlds``."""
    (tmp_path / "user_worlds.py").write_text(WORLDS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_worlds", raising=False)  # this test's file, not an earlier one's
    return "user_worlds"


def test_a_world_may_name_an_agent_value(paused: str, worlds: str) -> None:
    """``--world MODULE:NAME`` naming an Agent itself (not a function) decides with it."""
    code, out, err = runs(
        "reject", "ticket-1", "--store", paused, "--world", f"{worlds}:desk", "--reviewer", "ana", "--reason", "no"
    )
    assert (code, out.strip()) == (0, "ticket-1: answered"), err


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("number", "is a int, not an Agent or a function returning one"),
        ("parts", "returned a dict, not an Agent or a function returning one (build Agent(model, tools"),
        ("per_ticket", "cannot build the world 'user_worlds:per_ticket': "),
    ],
)
def test_a_world_that_gives_no_agent_fails_in_one_line(paused: str, worlds: str, name: str, said: str) -> None:
    """A value, a mapping of parts, or a function needing arguments: exit 1, one line saying so, nothing decided."""
    code, _, err = runs("approve", "ticket-1", "--store", paused, "--world", f"{worlds}:{name}", "--reviewer", "ana")
    assert code == 1 and said in err and len(err.strip().splitlines()) == 1, err
    assert SqliteStore(paused[len("sqlite:///") :]).load("ticket-1").status == "paused"


def test_approve_finds_the_world_in_the_folder_it_is_run_from(paused: str, tmp_path: Path) -> None:
    """The ``agent-fsm`` script run in the folder of ``desk.py`` approves with ``--world desk:world``."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "desk.py").write_text("from agent_fsm.examples.durable import world\n", encoding="utf-8")
    script = Path(sys.executable).with_name("agent-fsm")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    command = [str(script), "runs", "approve", "ticket-1", "--store", paused, "--world", "desk:world"]
    done = subprocess.run(
        [*command, "--reviewer", "ana"], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ticket-1: answered"


def test_cancel_ends_a_paused_run_cancelled_and_show_names_who(paused: str, tmp_path: Path) -> None:
    """``runs cancel`` ends the run ``cancelled`` with who and why; nothing is refunded; a second cancel fails."""
    code, out, err = runs(
        "cancel", "ticket-1", "--store", paused, "--world", WORLD, "--reviewer", "ana", "--reason", "duplicate"
    )
    assert code == 0, err
    assert out.strip() == "ticket-1: cancelled (cancelled by ana: duplicate)"
    code, out, _ = runs("show", "ticket-1", "--store", paused)
    assert "path: Proposing -> Executing -> Ready -> Proposing -> AwaitingApproval -> Cancelled" in out
    assert "decision: cancel by ana at " in out and "(duplicate)" in out
    refunds = tmp_path / "refunds.jsonl"
    assert not refunds.exists() or all(
        r["refunded_cents"] != 9999 for r in map(json.loads, refunds.read_text().splitlines())
    )
    code, _, err = runs("cancel", "ticket-1", "--store", paused, "--world", WORLD, "--reviewer", "bo")
    assert code == 1 and "not waiting for a decision" in err
