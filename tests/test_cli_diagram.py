"""Tests for the `agent-fsm diagram` command: outputs, and exit codes 0, 1 and 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_fsm import run
from agent_fsm.cli import app
from agent_fsm.diagrams import path_of, sequence_diagram, to_dot, to_mermaid
from agent_fsm.diagrams.catalog import agents, machines
from agent_fsm.engine import RUN_MACHINE
from agent_fsm.examples.demo import TASK, overreaching_model
from agent_fsm.examples.support_desk import make_support_desk, refund_gate

runner = CliRunner()
needs_dot = pytest.mark.usefixtures("graphviz_dot")


@pytest.fixture
def demo_trace(tmp_path: Path) -> tuple[Path, object]:
    """The demo run saved with RunState.to_json(), and its result."""
    desk = make_support_desk()
    result = run(TASK, overreaching_model(), desk.tools, gate=refund_gate)
    file = tmp_path / "run.json"
    file.write_text(result.state.to_json(), encoding="utf-8")
    return file, result


def _plain(text: str) -> str:
    """Text without the help boxes' borders and line wrapping."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


def _fails_in_one_line(result, message: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == f"error: {message}"
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_default_prints_the_run_machine_as_mermaid() -> None:
    """With no options the run machine's Mermaid goes to standard output."""
    result = runner.invoke(app, ["diagram"])
    assert result.exit_code == 0, result.output
    assert result.stdout == to_mermaid(RUN_MACHINE)


def test_dot_format_and_named_machine() -> None:
    """--format dot --machine run prints the DOT text."""
    result = runner.invoke(app, ["diagram", "--machine", "run", "--format", "dot"])
    assert result.exit_code == 0, result.output
    assert result.stdout == to_dot(RUN_MACHINE)


@needs_dot
def test_svg_to_stdout_and_png_to_a_file(tmp_path: Path) -> None:
    """SVG can be printed; PNG is written to --output, and a folder takes <machine>.<ext>."""
    svg = runner.invoke(app, ["diagram", "-f", "svg"])
    assert svg.exit_code == 0 and svg.stdout.startswith("<?xml") and "<svg" in svg.stdout
    png = runner.invoke(app, ["diagram", "-f", "png", "-o", str(tmp_path)])
    assert png.exit_code == 0, png.output
    assert (tmp_path / "run.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_trace_draws_the_runs_path(demo_trace, tmp_path: Path) -> None:
    """--trace highlights the saved run's path, whether saved bare or under the 'state' key."""
    file, result = demo_trace
    expected = to_mermaid(RUN_MACHINE, path=path_of(result))
    plain = runner.invoke(app, ["diagram", "--trace", str(file)])
    assert plain.exit_code == 0, plain.output
    assert plain.stdout == expected and "(taken ×4)" in expected
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"task": TASK, "state": json.loads(file.read_text())}), encoding="utf-8")
    out = tmp_path / "path.dot"
    dot = runner.invoke(app, ["diagram", "--trace", str(wrapped), "--format", "dot", "--output", str(out)])
    assert dot.exit_code == 0, dot.output
    assert out.read_text(encoding="utf-8") == to_dot(RUN_MACHINE, path=path_of(result))


def test_trace_sequence(demo_trace) -> None:
    """--trace --sequence prints the run's transcript as a Mermaid sequence diagram."""
    file, result = demo_trace
    done = runner.invoke(app, ["diagram", "--trace", str(file), "--sequence"])
    assert done.exit_code == 0, done.output
    assert done.stdout == sequence_diagram(result)


@needs_dot
def test_all_writes_every_catalog_diagram(tmp_path: Path) -> None:
    """--all --output DIR writes .mmd, .dot and .svg per machine and catalog agent, lists them; they match diagrams/."""
    done = runner.invoke(app, ["diagram", "--all", "--output", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    names = sorted(Path(line).name for line in done.stdout.splitlines())
    drawn = [*machines(), *(f"agent-{name}" for name in agents())]
    assert names == sorted(f"{name}.{ext}" for name in drawn for ext in ("mmd", "dot", "svg"))
    committed = Path(__file__).resolve().parent.parent / "diagrams"
    for name in names:
        if not name.endswith(".svg"):
            assert (tmp_path / "out" / name).read_text() == (committed / name).read_text()


def test_help_reads_well() -> None:
    """--help names every option, the examples and the exit codes."""
    done = runner.invoke(app, ["diagram", "--help"])
    assert done.exit_code == 0
    for text in (
        "--machine",
        "--format",
        "--output",
        "--trace",
        "--sequence",
        "--all",
        "mermaid|dot|svg|png",
        "agent-fsm diagram --all --output diagrams/",
        "Exit status: 0 done, 1 failed",
    ):
        assert text in _plain(done.stdout), text


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--format", "gif"], "gif"),
        (["--sequence"], "give --trace"),
        (["--all"], "give the folder with --output"),
        (["--all", "--output", "x", "--format", "dot"], "--all takes only --output"),
        (["--format", "png"], "give a file with --output"),
        (["--trace", "t.json", "--sequence", "--format", "dot"], "Mermaid only"),
        (["--trace", "t.json", "--machine", "other"], "path through the 'run' machine"),
        (["--full"], "--full is for --world"),
        (["--world", "m:a", "--all", "--output", "x"], "takes no --machine or --all"),
        (["--bogus"], "No such option"),
    ],
)
def test_usage_errors_exit_2(args: list[str], complaint: str) -> None:
    """Misused options are usage errors: exit status 2 and a message saying what is wrong."""
    done = runner.invoke(app, ["diagram", *args])
    assert done.exit_code == 2, done.output
    assert complaint in _plain(done.stderr)
    assert "Traceback" not in done.output


def test_unknown_machine_exits_1() -> None:
    """An unknown machine name fails in one line naming the known ones."""
    known = ", ".join(machines())
    _fails_in_one_line(
        runner.invoke(app, ["diagram", "--machine", "nope"]),
        f"unknown machine 'nope' (known: {known}; or give module:attribute)",
    )


def test_missing_trace_exits_1(tmp_path: Path) -> None:
    """A trace file that does not exist fails in one line."""
    missing = tmp_path / "gone.json"
    _fails_in_one_line(
        runner.invoke(app, ["diagram", "--trace", str(missing)]),
        f"cannot read trace {missing}: No such file or directory",
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b"{not json",
            "trace is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (
            b"[]",
            "trace must be a saved run state (RunState.to_json()) or an object with it under 'state'; got a JSON list",
        ),
        (b"\xff\xfe", "is not UTF-8 text: invalid start byte"),
    ],
)
def test_unreadable_trace_exits_1(tmp_path: Path, content: bytes, message: str) -> None:
    """A trace that does not parse as a saved run fails in one line saying why."""
    file = tmp_path / "bad.json"
    file.write_bytes(content)
    done = runner.invoke(app, ["diagram", "--trace", str(file)])
    expected = f"trace {file} {message}" if message.startswith("is not UTF-8") else message
    _fails_in_one_line(done, expected)


def test_inconsistent_trace_exits_1(demo_trace, tmp_path: Path) -> None:
    """A saved run whose record does not fit the machine fails in one line."""
    file, _ = demo_trace
    data = json.loads(file.read_text())
    data["path"][-1] = "StepLimit"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data), encoding="utf-8")
    _fails_in_one_line(
        runner.invoke(app, ["diagram", "--trace", str(broken)]),
        "the recorded path moves Proposing -> StepLimit, which is not one edge of the run machine",
    )
    data = json.loads(file.read_text())
    data["path"] = []  # a record without its path is reconstructed from the transcript, and checked
    data["turns"] = 9
    data["prompt_token_log"] += [0] * (9 - len(data["prompt_token_log"]))  # still loads: the reconstruction objects
    broken.write_text(json.dumps(data), encoding="utf-8")
    _fails_in_one_line(
        runner.invoke(app, ["diagram", "--trace", str(broken)]),
        "the transcript shows 4 model call(s) but the state counts 9",
    )


def test_unwritable_output_exits_1(tmp_path: Path) -> None:
    """An output file in a folder that does not exist fails in one line."""
    target = tmp_path / "no" / "such" / "run.mmd"
    _fails_in_one_line(
        runner.invoke(app, ["diagram", "--output", str(target)]), f"cannot write {target}: No such file or directory"
    )


def test_missing_dot_exits_1() -> None:
    """Without Graphviz on PATH, drawing SVG fails in one line that says how to install it (a real subprocess)."""
    done = subprocess.run(
        [sys.executable, "-m", "agent_fsm.cli", "diagram", "--format", "svg"],
        env={"PATH": "/nonexistent"},
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert done.stderr == (
        "error: Graphviz's `dot` program is not installed (on Debian or Ubuntu: apt-get install graphviz)\n"
    )
    assert done.stdout == ""
