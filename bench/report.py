"""
The performance figures the README quotes, re-measured in one run and printed as a Markdown table.

Not a test: it prints figures, each beside the target it is held to, under
a line saying when (UTC) and on what they were measured (CPU, cores, the
load average at the start and at the end, Python, agent_fsm and the peers'
versions). Every figure comes from the benchmark that owns it, called here
rather than copied:

* time per run over the minimal bare loop on the three scenarios of
  ``peers.py`` (``peerbench``'s verification and interleaved timing);
  with ``--peers``, LangGraph's, Burr's and pydantic-graph's time per run
  over agent_fsm's, the README's comparison row;
* memory kept by 10,000 paused over-reach runs (``peerbench``'s tracemalloc
  measure), agent_fsm's and the bare loop's;
* 1,000 concurrent ``arun`` runs, every model call a 5 ms sleep: runs/s over
  the bare asyncio loop's (``concurrent_runs.py``'s measure);
* the over-reach run checkpointed to SQLite on disk over the same run in
  memory, and to PostgreSQL with ``--postgres`` (``bench_checkpoint.py``'s);
* ``import agent_fsm`` in fresh interpreters with bytecode cached, and
  whether a plain run loads a schema library;
* with ``--temporal``, a lone run on Temporal through agent_fsm's workflow
  over the bare workflow (``temporal_scale.py``'s).

    PYTHONPATH=. python bench/report.py          # about five minutes on two cores
    PYTHONPATH=. python bench/report.py --quick  # about a minute, noisier
    PYTHONPATH=. python bench/report.py --peers --postgres --temporal

Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from peerbench.async_runs import ENTRIES, measure, verify_entries
from peerbench.contestants import CONTESTANTS, PEERS_PACKAGES, Contestant
from peerbench.machine import cpu_model, installed
from peerbench.measure import measure_import, measure_memory, schema_libraries_loaded, time_scenario
from peerbench.scenarios import scenarios
from peerbench.verification import verify_all, verify_paused

import agent_fsm

# The peers of the README's comparison row, in its order.
PEERS = ("LangGraph", "Burr", "pydantic-graph")
PAUSED_RUNS = 10_000  # the figure is given for this many paused runs, whatever number is kept to measure it


@dataclass(frozen=True)
class Sizes:
    """How much of each measure to run."""

    rounds: int  # interleaved rounds of the per-run timing
    sample: float  # seconds a timed batch of runs lasts
    turns: int  # turns of the wanderer
    paused: int  # paused runs kept alive for the memory figure
    concurrent: int  # runs at once
    concurrent_rounds: int
    checkpoint_runs: int  # runs per contender per round
    checkpoint_rounds: int
    imports: int  # fresh interpreters
    temporal_runs: int  # lone runs of each workflow


DEFAULT = Sizes(31, 0.1, 200, 10_000, 1000, 9, 200, 21, 21, 20)
# The bytes a paused run retains are the same with 1,000 kept as with 10,000 (tracemalloc makes keeping
# them slow: a minute or two for 10,000 on a loaded machine).
QUICK = Sizes(7, 0.02, 200, 1_000, 1000, 3, 60, 5, 7, 10)


@dataclass(frozen=True)
class Row:
    """One line of the table; ``met`` is None where there is no target."""

    figure: str
    measured: str
    target: str = ""
    met: bool | None = None

    def markdown(self) -> str:
        verdict = {True: "yes", False: "no", None: ""}[self.met]
        return f"| {self.figure} | {self.measured} | {self.target} | {verdict} |"


def _progress(started: float, what: str) -> None:
    print(f"[{time.perf_counter() - started:5.0f} s] {what}", file=sys.stderr, flush=True)


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def _tree() -> str:
    """agent_fsm's version, where it was imported from and, in a git checkout, its commit (``+`` if changed)."""
    folder = Path(agent_fsm.__file__).resolve().parent
    where = f"agent_fsm {agent_fsm.__version__}"
    try:
        git = ["git", "-C", str(folder)]
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        changed = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return f"{where} (installed at {folder.parent})"
    return f"{where} (tree at {commit.stdout.strip()}{'+' if changed.stdout.strip() else ''})"


def per_run(sizes: Sizes, peers: bool) -> list[Row]:
    """agent_fsm's time per run over the bare loop's, and with ``peers`` the peers' over agent_fsm's."""
    names = {"bare loop", "agent_fsm", *(PEERS if peers else ())}
    contestants: list[Contestant] = [c for c in CONTESTANTS if c.name in names and c.available]
    timed = scenarios(sizes.turns)
    for scenario in timed:
        verify_all(contestants, scenario)
    gc.collect()
    gc.freeze()  # long-lived objects (frameworks, caches) stay out of the collections the runs cause
    ratios = {s.key: time_scenario(contestants, s, sizes.rounds, sizes.sample) for s in timed}
    rows = []
    for scenario in timed:
        bare, ratio = ratios[scenario.key]
        rows.append(
            Row(
                f"time per run ÷ the minimal bare loop's: {scenario.title}",
                f"{ratio['agent_fsm']:.2f}x (bare loop {bare * 1e6:,.0f} µs a run)",
                "≤ 1.5x",
                ratio["agent_fsm"] <= 1.5,
            )
        )
    for peer in PEERS if peers else ():
        if any(c.name == peer for c in contestants):
            cells = ", ".join(f"{ratios[s.key][1][peer] / ratios[s.key][1]['agent_fsm']:.1f}" for s in timed)
            rows.append(Row(f"{peer}'s time per run ÷ agent_fsm's (the three scenarios)", cells))
        else:
            rows.append(Row(f"{peer}'s time per run ÷ agent_fsm's", "not installed (pip install -e '.[bench]')"))
    return rows


def paused_memory(sizes: Sizes) -> list[Row]:
    verify_paused()
    memory, states = measure_memory(sizes.paused)
    del states
    engine, bare = (memory[k] * PAUSED_RUNS / 2**20 for k in ("engine", "bare"))
    kept = "" if sizes.paused == PAUSED_RUNS else f"; {sizes.paused:,} kept, scaled"
    return [
        Row(
            f"{PAUSED_RUNS:,} paused over-reach runs, memory retained (tracemalloc)",
            f"{engine:.1f} MiB ({memory['engine']:,.0f} B a run); bare loop {bare:.1f} MiB{kept}",
            "≤ 30 MiB",
            engine <= 30,
        )
    ]


def concurrency(sizes: Sizes) -> list[Row]:
    entries = [e for e in ENTRIES if e.key in ("bare", "agent_fsm")]
    verify_entries(entries)
    figures, ratios = measure(entries, sizes.concurrent, sizes.concurrent_rounds)
    ratio = ratios["agent_fsm", "bare"]
    return [
        Row(
            f"{sizes.concurrent:,} concurrent `arun` runs (5 ms a model call): runs/s ÷ the bare asyncio loop's",
            f"{ratio:.2f}x ({figures['agent_fsm'].runs_per_second:,.0f} against"
            f" {figures['bare'].runs_per_second:,.0f} runs/s)",
            "≥ 0.8x",
            ratio >= 0.8,
        )
    ]


def checkpoint(sizes: Sizes, postgres: bool) -> list[Row]:
    from bench_checkpoint import compare

    found = compare(sizes.checkpoint_rounds, sizes.checkpoint_runs, postgres=postgres, parts=False)
    memory = found.times["in memory"]
    rows = []
    for name in found.stores:
        ratio = statistics.median(t / m for t, m in zip(found.times[name], memory))
        sqlite = name == "SQLite on disk"
        rows.append(
            Row(
                f"over-reach run checkpointed to {name} ({found.commits} commits) ÷ in memory",
                f"{ratio:.1f}x ({statistics.median(found.times[name]) * 1e3:.2f} against"
                f" {statistics.median(memory) * 1e3:.2f} ms a run)",
                "≤ 1.5x" if sqlite else "",
                ratio <= 1.5 if sqlite else None,
            )
        )
    if not postgres:
        rows.append(Row("the same on PostgreSQL", "not measured (`--postgres`)"))
    return rows


def imports(sizes: Sizes) -> list[Row]:
    found = measure_import(sizes.imports, cache_bytecode=True)
    loaded = schema_libraries_loaded()
    return [
        Row(
            f"`import agent_fsm`, fresh interpreter, bytecode cached (median of {sizes.imports})",
            f"{found['import'] * 1e3:.0f} ms (fastest {found['import_min'] * 1e3:.0f} ms)",
            "≤ 70 ms",
            found["import"] <= 0.070,
        ),
        Row(
            "the same, then a first run on the support desk (a tool declared with a JSON Schema)",
            f"{found['first_run'] * 1e3:.0f} ms (fastest {found['first_run_min'] * 1e3:.0f} ms)",
        ),
        Row("schema libraries a plain run loads (shorthand tools)", ", ".join(loaded) or "none", "none", not loaded),
    ]


def temporal(sizes: Sizes, wanted: bool) -> list[Row]:
    figure = "a lone run on Temporal, agent_fsm's workflow ÷ a bare workflow with the same activities"
    if not wanted:
        return [Row(figure, "not measured (`--temporal`, or see `bench/temporal_scale.py`)", "≤ 1.3x")]
    from temporal_scale import lone_runs

    engine, bare = lone_runs(sizes.temporal_runs)
    measured = f"{engine / bare:.2f}x ({engine * 1e3:.0f} against {bare * 1e3:.0f} ms a run)"
    return [Row(figure, measured, "≤ 1.3x", engine <= 1.3 * bare)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes: about a minute, noisier")
    parser.add_argument("--peers", action="store_true", help="also time LangGraph, Burr and pydantic-graph")
    parser.add_argument("--postgres", action="store_true", help="also checkpoint to a throw-away PostgreSQL server")
    parser.add_argument("--temporal", action="store_true", help="also time a lone run on a Temporal dev server")
    for field in dataclasses.fields(Sizes):
        kind = float if field.name == "sample" else int
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=kind, help="override the size")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else DEFAULT
    chosen = {f.name: getattr(args, f.name) for f in dataclasses.fields(Sizes) if getattr(args, f.name) is not None}
    sizes = dataclasses.replace(sizes, **chosen)

    started = time.perf_counter()
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_start = _load()
    rows: list[Row] = []
    measures: list[tuple[str, Callable[[], list[Row]]]] = [
        ("time per run", lambda: per_run(sizes, args.peers)),
        ("paused runs' memory", lambda: paused_memory(sizes)),
        ("concurrent runs", lambda: concurrency(sizes)),
        ("checkpointed runs", lambda: checkpoint(sizes, args.postgres)),
        ("import", lambda: imports(sizes)),
        ("Temporal", lambda: temporal(sizes, args.temporal)),
    ]
    for name, measured in measures:
        _progress(started, f"measuring {name}")
        rows += measured()
    took = time.perf_counter() - started
    peers = installed(PEERS_PACKAGES)
    how = " ".join(["python bench/report.py", *(argv if argv is not None else sys.argv[1:])])
    duration = f"{took:.0f} s" if took < 120 else f"{took / 60:.1f} minutes"
    print(
        f"Measured {date} on {os.cpu_count()} cores ({cpu_model()}), load average {load_start} at the start"
        f" and {_load()} at the end;\nPython {platform.python_version()}; {', '.join([_tree(), *peers])};"
        f"\n`{how}`, {duration}.\n"
    )
    print("| figure | measured | target | met |")
    print("|---|---|---|---|")
    for row in rows:
        print(row.markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
