"""
Every ``agent-fsm`` command against bad files, databases and arguments: exit 1 and one line, never a traceback.

Each runs the real command in a subprocess, as a person would meet it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_fsm import ScriptedModel, answer_message, run, tool_call_message
from agent_fsm.examples.support_desk import make_support_desk
from agent_fsm.store import SqliteStore

DEEP = "[" * 100_000 + "]" * 100_000
LONG_NUMBER = '{"turns": 1' + "0" * 5000 + "}"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_fsm.cli", *args],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=120,
    )


def _fails_in_one_line(done: subprocess.CompletedProcess[str], *said: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    for words in said:
        assert words in lines[0], lines[0]


def _stored(path: Path, count: int = 30) -> str:
    desk = make_support_desk()
    with SqliteStore(path) as store:
        for index in range(count):
            model = ScriptedModel([answer_message(f"done {index} " + "x" * 300)])
            run(f"ask {index}", model, desk.tools, store=store, run_id=f"r{index}")
    return f"sqlite:///{path}"


@pytest.mark.parametrize("damage", ["foreign", "truncated", "scribbled", "directory"])
@pytest.mark.parametrize("command", ["list", "show"])
def test_runs_on_a_bad_database_fails_in_one_line(tmp_path: Path, damage: str, command: str) -> None:
    """A file that is not a database, one cut short or overwritten, or a directory: exit 1, one line."""
    path = tmp_path / "runs.db"
    url = _stored(path)
    data = path.read_bytes()
    if damage == "foreign":
        path.write_bytes(b"name,amount\nACME,50\n" * 500)
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2 + 100])
    elif damage == "scribbled":
        path.write_bytes(data[:4096] + bytes(range(256)) * 16 + data[8192:])
    else:
        path.unlink()
        path.mkdir()
    args = ["runs", command, *(["r3"] if command == "show" else []), "--store", url]
    _fails_in_one_line(_cli(*args))


def test_runs_on_a_damaged_row_shows_the_rest(tmp_path: Path) -> None:
    """One unreadable row: list shows it as broken and the others as usual, then exits 1; show on it exits 1."""
    path = tmp_path / "runs.db"
    url = _stored(path, count=3)
    with SqliteStore(path) as store, store._transaction() as tx:
        tx.run("UPDATE agent_fsm_runs SET created_at = 'yesterday', state = '{' WHERE run_id = 'r1'")
    listed = _cli("runs", "list", "--store", url)
    assert listed.returncode == 1 and "Traceback" not in listed.stderr
    assert "r0" in listed.stdout and "r2" in listed.stdout and "r1" in listed.stdout
    assert listed.stderr.strip().startswith("error: ") and len(listed.stderr.strip().splitlines()) == 1
    _fails_in_one_line(_cli("runs", "show", "r1", "--store", url), "r1")


def test_runs_show_prints_a_lone_surrogate_as_its_escape(tmp_path: Path) -> None:
    """A transcript holding a lone surrogate (legal JSON) is shown, the surrogate written as its escape."""
    desk = make_support_desk()
    reply = tool_call_message("c\ud800", "lookup_order", {"order_id": "A-\ud800"})
    with SqliteStore(tmp_path / "runs.db") as store:
        run("task \ud800", ScriptedModel([reply, answer_message("ok \ud800")]), desk.tools, store=store, run_id="s1")
    done = _cli("runs", "show", "s1", "--store", f"sqlite:///{tmp_path / 'runs.db'}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\\ud800" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize("content", ["deep", "long-number", "not-utf8", "deep-in-state"])
@pytest.mark.parametrize("command", ["view", "diagram"])
def test_a_bad_trace_fails_in_one_line(tmp_path: Path, content: str, command: str) -> None:
    """view and diagram --trace on JSON Python cannot read, or a file that is not UTF-8: exit 1, one line."""
    trace = tmp_path / "trace.json"
    if content == "deep":
        trace.write_text(DEEP)
    elif content == "long-number":
        trace.write_text(LONG_NUMBER)
    elif content == "deep-in-state":
        trace.write_text('{"state": "' + "[" * 100_000 + '"}')
    else:
        trace.write_bytes(b'{"state": "\xff\xfe caf\xe9"}')
    if command == "view":
        done = _cli("view", str(trace), "-o", str(tmp_path / "out.html"))
    else:
        done = _cli("diagram", "--trace", str(trace))
    _fails_in_one_line(done, "trace")


# 30,000 levels: deeper than Python's json reads, and still within what one command-line argument may hold.
@pytest.mark.parametrize("arguments", ["[" * 30_000 + "]" * 30_000, '{"amount_cents": 1' + "0" * 5000 + "}", "{no"])
def test_approve_with_unreadable_arguments_is_refused_in_one_line(tmp_path: Path, arguments: str) -> None:
    """--arguments nested absurdly deep or holding a 5,000-digit number: refused in one line, nothing decided."""
    url = _stored(tmp_path / "runs.db", count=1)
    done = _cli(
        "runs",
        "approve",
        "r0",
        "--store",
        url,
        "--world",
        "agent_fsm.examples.durable:world",
        "--reviewer",
        "ana",
        "--arguments",
        arguments,
    )
    _fails_in_one_line(done, "--arguments")
    with SqliteStore(tmp_path / "runs.db") as store:
        assert store.history("r0") == []


def test_a_world_that_fails_is_said_in_one_line(tmp_path: Path) -> None:
    """--world naming a function that does not return a mapping (here os:getcwd) fails in one line."""
    url = _stored(tmp_path / "runs.db", count=1)
    done = _cli("runs", "recover", "--store", url, "--world", "os:getcwd")
    _fails_in_one_line(done, "os:getcwd")
