"""A store is found by a path (``SqliteStore``) or a URL (``open_store``); a reader never makes a missing database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_fsm.store import DatabaseError, SqliteStore, open_store
from tests.cli_store import runs


def test_sqlite_store_given_a_url_says_it_takes_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``SqliteStore("sqlite:///runs.db")`` names both ways in and creates nothing (no ``sqlite:`` folder)."""
    monkeypatch.chdir(tmp_path)
    for url in ("sqlite:///runs.db", "postgresql://me@localhost/runs"):
        with pytest.raises(ValueError, match=r"SqliteStore takes a file path.*open_store\(") as caught:
            SqliteStore(url)
        assert repr(url) in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_open_store_without_create_refuses_a_missing_file(tmp_path: Path) -> None:
    """``create=False``: a missing SQLite file is a DatabaseError naming its path, and no file appears."""
    missing = tmp_path / "typo.db"
    with pytest.raises(DatabaseError, match=f"no SQLite database at {str(missing)!r}"):
        open_store(f"sqlite:///{missing}", create=False)
    with pytest.raises(DatabaseError, match="no SQLite database"):
        SqliteStore(missing, create=False)
    assert not missing.exists()
    SqliteStore(missing).close()  # the default still creates it, as a run's first commit needs
    with open_store(f"sqlite:///{missing}", create=False) as opened:
        assert opened.runs() == []


@pytest.mark.parametrize(
    "command",
    [
        ["list"],
        ["show", "ticket-1"],
        ["export", "ticket-1"],
        ["approve", "ticket-1", "--world", "agent_fsm.examples.durable:world", "--reviewer", "ana"],
        ["fork", "ticket-1", "--at", "0", "--as", "again"],
    ],
)
def test_a_command_on_a_mistyped_store_fails_in_one_line_and_creates_nothing(
    command: list[str], tmp_path: Path
) -> None:
    """A typo in ``--store`` is exit 1 with one line naming the path, not "no runs" over a new empty database."""
    missing = tmp_path / "typo.db"
    code, out, err = runs(*command, "--store", f"sqlite:///{missing}")
    assert code == 1, out
    assert err == f"error: no SQLite database at {str(missing)!r} (check the path; a reader never creates one)\n"
    assert not missing.exists() and list(tmp_path.iterdir()) == []


def test_the_inbox_on_a_mistyped_store_fails_in_one_line(tmp_path: Path) -> None:
    """``agent-fsm inbox`` checks the store before serving: a missing file is one line, exit 1, nothing created."""
    missing = tmp_path / "typo.db"
    done = subprocess.run(
        [sys.executable, "-m", "agent_fsm.cli", "inbox", "--store", f"sqlite:///{missing}"]
        + ["--world", "agent_fsm.examples.durable:world"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "AGENT_FSM_REVIEWERS": "ana:" + "t" * 20},
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: no SQLite database at ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr and not missing.exists()
