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
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("support-desk/")}
    assert rows["support-desk/overreach-denied"] == ["passed", "answered"]
    assert rows["support-desk/b"][:2] == ["FAILED", "answered"]
    assert "turns: expected 5, got 4" in out
    assert "1 of 2 specs held; 1 failed, 0 malformed" in out


def test_directory_run_reports_a_malformed_spec_and_goes_on(tmp_path: Path) -> None:
    """A malformed spec first in the directory does not abort the run: every spec gets a row and progress is shown."""
    (tmp_path / "a_bad.toml").write_text("task = 1\n")
    shutil.copy(OVERREACH, tmp_path / "b.toml")
    code, out, _ = _run(str(tmp_path))
    assert code == 1
    assert re.search(r"\] 1/2  MALFORMED .*a_bad\.toml", out)
    assert re.search(r"\] 2/2  passed +support-desk/overreach-denied", out)
    assert re.search(r"a_bad\.toml +MALFORMED +- +missing", out)
    assert "1 of 2 specs held; 0 failed, 1 malformed" in out


def test_directory_of_passing_specs_exits_0(tmp_path: Path) -> None:
    """Exit 0 only when every spec held."""
    shutil.copy(OVERREACH, tmp_path / "a.toml")
    code, out, _ = _run(str(tmp_path))
    assert code == 0 and "1 of 1 specs held; 0 failed, 0 malformed" in out


WORLD = """
from agent_fsm import ToolSpec
from agent_fsm.scenarios import Environment


def environment():
    effects = []

    def book(date, hours):
        effects.append({"date": date, "hours": hours})
        return {"booked": date}

    schema = {"type": "object", "properties": {"date": {"type": "string", "format": "date"},
              "hours": {"type": "integer", "minimum": 1}}, "required": ["date", "hours"], "additionalProperties": False}
    return Environment(tools={"book_room": ToolSpec("Book a room.", schema, book, effectful=True)}, effects=effects)
"""

USER_SPEC = """
name = "bookings/refused-by-default"
description = "A booking is effectful: with no gate the secure default refuses it."
environment = "{module}:environment"
task = "Book a room for tomorrow."

[model]
turns = [
  {{ call = {{ id = "c1", name = "book_room", arguments = {{ date = "2031-03-04", hours = 2 }} }} }},
  {{ answer = "I could not book it." }},
]

[expect]
stop = "answered"
effects = []
observation_kinds = ["denied"]
"""


def _user_project(tmp_path: Path, module: str, monkeypatch: pytest.MonkeyPatch, *, configured: bool) -> Path:
    """A user's project: their own world package, a spec naming it, and (optionally) pyproject.toml allowing it."""
    (tmp_path / module).mkdir()
    (tmp_path / module / "__init__.py").write_text(WORLD)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "booking.toml").write_text(USER_SPEC.format(module=module))
    if configured:
        (tmp_path / "pyproject.toml").write_text(f'[tool.agent_fsm]\nspec-modules = ["{module}"]\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return tmp_path / "specs"


def test_users_world_is_refused_without_being_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """By default a spec may only name agent_fsm's own example worlds."""
    specs = _user_project(tmp_path, "roombook_a", monkeypatch, configured=False)
    code, out, _ = _run(str(specs))
    assert code == 1 and "outside the allowed packages" in out and "MALFORMED" in out


def test_allow_module_runs_a_users_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--allow-module lets specs name the user's package; the spec runs and holds."""
    specs = _user_project(tmp_path, "roombook_b", monkeypatch, configured=False)
    code, out, err = _run(str(specs / "booking.toml"), "--allow-module", "roombook_b")
    assert code == 0, out + err
    assert "ending: answered" in out


def test_pyproject_spec_modules_allow_a_users_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """[tool.agent_fsm] spec-modules in the project's pyproject.toml allows the package for a directory run."""
    specs = _user_project(tmp_path, "roombook_c", monkeypatch, configured=True)
    code, out, err = _run(str(specs))
    assert code == 0, out + err
    assert "1 of 1 specs held" in out


def test_allow_module_must_be_a_package_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty or wildcard --allow-module is refused rather than read as "allow everything"."""
    specs = _user_project(tmp_path, "roombook_d", monkeypatch, configured=False)
    for bad in ("", "*", "a..b"):
        code, _, err = _run(str(specs), "--allow-module", bad)
        assert code == 1 and "dotted package name" in err


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
    """Every `agent-fsm run specs/...` command in the README and the docs names a spec or directory that holds."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    targets = sorted(set(re.findall(r"^agent-fsm run (specs/\S+)", text, flags=re.MULTILINE)))
    targets += re.findall(r"`agent-fsm run (specs/\S+?)`", (REPO / "README.md").read_text(encoding="utf-8"))
    assert len(targets) >= 15
    for target in targets:
        code, out, err = _run(str(REPO / target))
        assert code == 0, f"{target}: {out}{err}"
