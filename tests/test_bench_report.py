"""bench/report.py, the README's performance table, runs end to end at tiny sizes and prints every row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = [
    "--quick",
    *("--rounds", "1", "--sample", "0.002", "--turns", "12", "--paused", "50", "--concurrent", "10"),
    *("--concurrent-rounds", "1", "--checkpoint-runs", "3", "--checkpoint-rounds", "1", "--imports", "1"),
]


def test_report_prints_one_row_per_figure(tmp_path: Path) -> None:
    """Every figure gets a row of four cells under the dated header; a plain run loads no schema library."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "report.py"), *TINY],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # the SQLite store's throw-away folder goes here
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    header, table = done.stdout.split("\n\n", 1)
    assert header.startswith("Measured ") and " UTC on " in header and "load average" in header
    assert "agent_fsm " in header and "Python " in header
    lines = table.strip().splitlines()
    assert lines[:2] == ["| figure | measured | target | met |", "|---|---|---|---|"]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines[2:]]
    assert all(len(row) == 4 for row in rows), rows
    figures = [row[0] for row in rows]
    assert sum(f.startswith("time per run ÷ the minimal bare loop's") for f in figures) == 3
    for wanted in ("paused over-reach runs", "concurrent `arun` runs", "SQLite on disk", "`import agent_fsm`"):
        assert any(wanted in f for f in figures), (wanted, figures)
    verdicts = {row[0]: row for row in rows}
    schema = verdicts["schema libraries a plain run loads (shorthand tools)"]
    assert schema[1:] == ["none", "none", "yes"]
    assert all(row[3] in ("yes", "no") for row in rows if row[2] and "not measured" not in row[1]), rows
