"""``agent-fsm run``: output, exit codes 0/1/2, ``--list`` and ``--save``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_fsm.cli import app

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs"
OVERREACH = SPECS / "support_desk" / "overreach_denied.toml"

runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["run", *args])
    return result.exit_code, result.stdout, result.stderr


def test_passing_spec_prints_everything_and_exits_0() -> None:
    """Transcript, typed ending, effect log and every expectation and invariant, then exit 0."""
    code, out, _ = _run(str(OVERREACH))
    assert code == 0
    assert '-> refund_order {"order_id": "A-17", "amount_cents": 9999}' in out
    assert "ending: answered" in out
    assert 'effect log: [{"order_id": "A-17", "refunded_cents": 4999}]' in out
    assert "ok      observation_kinds: ['result', 'denied', 'result']" in out
    assert "ok      invariant effects_authorized: True" in out
    assert "FAILED" not in out


def test_failing_spec_exits_1_and_says_what_failed(tmp_path: Path) -> None:
    """A spec whose claim does not hold exits 1 and shows expected against actual."""
    spec = tmp_path / "wrong.toml"
    spec.write_text(OVERREACH.read_text().replace("turns = 4", "turns = 2"))
    code, out, _ = _run(str(spec))
    assert code == 1
    assert "FAILED  turns: expected 2, got 4" in out


def test_missing_spec_exits_1_in_one_line(tmp_path: Path) -> None:
    """A missing file is one error line on stderr, no traceback."""
    code, out, err = _run(str(tmp_path / "absent.toml"))
    assert code == 1
    assert err.strip().splitlines() == [f"error: {tmp_path / 'absent.toml'}: no such spec file"]
    assert "Traceback" not in out + err


def test_malformed_spec_exits_1_naming_the_key(tmp_path: Path) -> None:
    """A malformed spec is one line naming file and key."""
    spec = tmp_path / "bad.toml"
    spec.write_text(OVERREACH.read_text().replace('gate = "refund"', 'gate = "refund"\ncolour = "red"'))
    code, _, err = _run(str(spec))
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "key 'colour'" in lines[0] and str(spec) in lines[0]


def test_no_spec_is_a_usage_error() -> None:
    """Without SPEC or --list the command exits 2 (usage)."""
    code, _, _ = _run()
    assert code == 2


def test_save_writes_the_trace(tmp_path: Path) -> None:
    """--save writes JSON with the spec name, the RunState, the effect log and the expectations."""
    trace = tmp_path / "trace.json"
    code, out, _ = _run(str(OVERREACH), "--save", str(trace))
    assert code == 0 and f"trace saved to {trace}" in out
    data = json.loads(trace.read_text())
    assert data["spec"] == "support-desk/overreach-denied"
    assert data["state"]["machine_state"] == "Answered"
    assert data["state"]["turns"] == 4
    assert data["effects"] == [{"order_id": "A-17", "refunded_cents": 4999}]
    assert {e["name"]: e["held"] for e in data["expectations"]}["turns"] is True


def test_save_with_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    """--save names one trace, so a directory of specs is refused with exit 2."""
    code, _, _ = _run(str(SPECS / "support_desk"), "--save", str(tmp_path / "t.json"))
    assert code == 2


def test_list_shows_names_and_descriptions() -> None:
    """--list prints each spec's path, name and description."""
    code, out, _ = _run("--list", str(SPECS))
    assert code == 0
    assert "support-desk/liar" in out
    assert "the outcome check fails" in out
    assert "handoff/permanent-failure" in out


def test_list_reports_a_malformed_spec(tmp_path: Path) -> None:
    """--list marks a malformed spec and exits 1, still listing the good ones."""
    shutil.copy(OVERREACH, tmp_path / "good.toml")
    (tmp_path / "bad.toml").write_text("task = 1\n")
    code, out, _ = _run("--list", str(tmp_path))
    assert code == 1
    assert "support-desk/overreach-denied" in out
    assert "bad.toml  MALFORMED" in out


def test_list_of_nothing_exits_1(tmp_path: Path) -> None:
    """An empty or missing spec directory is an error."""
    code, _, err = _run("--list", str(tmp_path / "none"))
    assert code == 1 and "no specs found" in err


def test_directory_runs_every_spec(tmp_path: Path) -> None:
    """A directory runs each spec, one line each, exit 1 when any fails."""
    shutil.copy(OVERREACH, tmp_path / "a.toml")
    (tmp_path / "b.toml").write_text(
        OVERREACH.read_text().replace("turns = 4", "turns = 5").replace("overreach-denied", "b")
    )
    code, out, _ = _run(str(tmp_path))
    assert code == 1
    assert "ok      support-desk/overreach-denied  (answered)" in out
    assert "FAILED  support-desk/b  (answered)" in out
    assert "FAILED  turns: expected 5, got 4" in out
    assert "1 of 2 specs held" in out


SCRIPT = Path(sys.executable).parent / "agent-fsm"


@pytest.mark.skipif(not SCRIPT.exists(), reason="the agent-fsm console script is not installed beside this Python")
def test_console_script_exit_codes(tmp_path: Path) -> None:
    """The installed agent-fsm script exits 0 for a holding spec and 1 for a missing one."""
    script = str(SCRIPT)
    ok = subprocess.run([script, "run", str(OVERREACH)], capture_output=True, text=True, cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    missing = subprocess.run([script, "run", str(tmp_path / "x.toml")], capture_output=True, text=True, cwd=REPO)
    assert missing.returncode == 1
    assert "Traceback" not in missing.stderr


def test_readme_commands_name_specs_that_hold() -> None:
    """Every `agent-fsm run specs/...` line in the README names a spec or directory that holds."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"^agent-fsm run (specs/\S+)", readme, flags=re.MULTILINE)
    assert len(targets) >= 15
    for target in targets:
        code, out, err = _run(str(REPO / target))
        assert code == 0, f"{target}: {out}{err}"
