"""
What a durable run costs as it grows: the time per turn and the bytes stored per turn, by the run's length.

Not a test: it prints figures and ratios. The run's model calls one
effectful lookup per turn (a new order each turn, a tiny result) and
answers after the last one; the store commits around every effectful call,
so a run of ``n`` turns makes about ``2n`` commits. Each length runs
``--repeat`` times, each into a fresh database (SQLite on local disk; with
``--postgres`` also a throw-away PostgreSQL server with fsync on), beside
the same run in memory; the fastest of the repeats is printed (a shared
machine's other work only ever slows a run down).
"Bytes stored" is the size of the run's tables once it has ended: the
SQLite file after its write-ahead log is folded in, PostgreSQL's
``pg_total_relation_size`` of the tables.

The target is both figures flat in the run's length: the longest run's
within 1.3x of the shortest's. A store that writes each checkpoint's growing
fields whole grows both with the length (quadratic in total), so the long
runs are slow and their databases large: ``--lengths`` picks fewer.

    python bench/bench_growth.py [--lengths 250,1000,4000,10000] [--postgres] [--synchronous NORMAL|FULL] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' PostgreSQL server helper

from agent_fsm import Limits, ScriptedModel, ToolSpec, allow_all, run
from agent_fsm.engine import answer_message, tool_call_message
from agent_fsm.store import PostgresStore, SqliteStore
from agent_fsm.store.sql import SqlStore
from tests.postgres_server import INSTALL_HINT, PostgresServer, find_bin

TASK = "Look each order up, one a turn."
TABLES = ("agent_fsm_runs", "agent_fsm_checkpoints", "agent_fsm_effects", "agent_fsm_decisions", "agent_fsm_forks")


def _tools() -> dict[str, ToolSpec]:
    def lookup(order: int) -> dict[str, Any]:
        return {"order": order, "status": "shipped"}

    return {"lookup": ToolSpec("Look an order up.", {"order": int}, lookup, effectful=True, idempotent=True)}


def _model(turns: int) -> ScriptedModel:
    calls = [tool_call_message(f"c{i}", "lookup", {"order": i}) for i in range(turns)]
    return ScriptedModel([*calls, answer_message("All looked up.")])


def _limits(turns: int) -> Limits:
    return Limits(max_turns=turns + 2, max_prompt_tokens=10**12)


def _server_cpu(store: SqlStore | None) -> float:
    """CPU seconds the PostgreSQL server process serving ``store`` has run (0 for other stores, or no /proc)."""
    if not isinstance(store, PostgresStore):
        return 0.0
    with store._transaction(write=False) as tx:
        pid = tx.rows("SELECT pg_backend_pid()")[0][0]
    try:  # the server runs on this machine (the bench starts it): its time on a CPU, in nanoseconds
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _timed(turns: int, store: SqlStore | None, run_id: str) -> tuple[float, float]:
    """
    Seconds per turn of one run of ``turns`` turns (``store=None``: in memory), and the CPU seconds per turn.

    The CPU time is this process's (the engine, the driver, SQLite's own
    work) and, on PostgreSQL, the server process's serving the store: the
    machine's other jobs do not stretch it, nor does waiting on the disk.
    """
    model, tools, limits = _model(turns), _tools(), _limits(turns)
    gc.collect()
    served = _server_cpu(store)
    start, used = time.perf_counter(), time.process_time()
    if store is None:
        result = run(TASK, model, tools, limits=limits, gate=allow_all)
    else:
        result = run(TASK, model, tools, limits=limits, gate=allow_all, store=store, run_id=run_id)
    elapsed, used = time.perf_counter() - start, time.process_time() - used
    used += _server_cpu(store) - served
    if result.stop is None or result.stop.value != "answered" or result.state.turns < turns:
        raise SystemExit(f"the {turns}-turn run ended {result.stop} after {result.state.turns} turns")
    return elapsed / turns, used / turns


def _sqlite_bytes(path: Path) -> int:
    store = SqliteStore(path)
    try:
        with store._transaction(write=False) as tx:
            tx.rows("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        store.close()
    return path.stat().st_size


def _postgres_bytes(store: SqlStore) -> int:
    with store._transaction(write=False) as tx:
        sizes = [tx.rows(f"SELECT pg_total_relation_size('{table}')")[0][0] for table in TABLES]
    return int(sum(sizes))


Figures = dict[str, dict[int, tuple[float, float, float]]]


def measure(lengths: list[int], *, postgres: bool, synchronous: str, repeat: int = 1) -> Figures:
    """
    For each store and length: (seconds per turn, CPU seconds per turn, bytes stored per turn).

    Each the least of ``repeat`` runs (see :func:`_timed` for the CPU time).
    """
    server = None
    if postgres:
        found = find_bin()
        if found is None:
            raise SystemExit(INSTALL_HINT)
        server = PostgresServer(found, durable=True).start()
    figures: Figures = {"in memory": {}, "SQLite on disk": {}}
    if server is not None:
        figures["PostgreSQL"] = {}
    try:
        with tempfile.TemporaryDirectory(prefix=".agent-fsm-bench-", dir=Path.cwd()) as folder:
            for turns in lengths:
                for _ in range(repeat):
                    _keep(figures["in memory"], turns, *_timed(turns, None, ""), 0.0)
                    path = Path(folder) / f"growth-{turns}.db"
                    sqlite = SqliteStore(path, synchronous=synchronous)
                    per_turn = _timed(turns, sqlite, "growth")
                    sqlite.close()
                    _keep(figures["SQLite on disk"], turns, *per_turn, _sqlite_bytes(path) / turns)
                    for suffix in ("", "-wal", "-shm"):
                        Path(f"{path}{suffix}").unlink(missing_ok=True)
                    if server is not None:
                        store = PostgresStore(server.new_database())
                        per_turn = _timed(turns, store, "growth")
                        _keep(figures["PostgreSQL"], turns, *per_turn, _postgres_bytes(store) / turns)
                        store.close()
                print(f"  ... {turns} turns measured", file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.stop()
    return figures


def _keep(by_length: dict[int, tuple[float, float, float]], turns: int, wall: float, cpu: float, stored: float) -> None:
    """Keep the least time and CPU time per turn measured for ``turns`` (the bytes stored are the same each time)."""
    if turns in by_length:
        wall, cpu = min(wall, by_length[turns][0]), min(cpu, by_length[turns][1])
    by_length[turns] = (wall, cpu, stored)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="250,1000,4000,10000", help="run lengths in turns, comma-separated")
    parser.add_argument("--postgres", action="store_true", help="also store the runs in a throw-away PostgreSQL")
    parser.add_argument("--synchronous", default="NORMAL", help="SQLite's synchronous setting")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each length; the fastest is printed")
    args = parser.parse_args()
    lengths = [int(length) for length in args.lengths.split(",")]
    figures = measure(lengths, postgres=args.postgres, synchronous=args.synchronous, repeat=args.repeat)
    print(
        f"durable run, one effectful lookup a turn; SQLite synchronous={args.synchronous};"
        f" fastest of {args.repeat} runs per length"
    )
    first, last = lengths[0], lengths[-1]
    for name, by_length in figures.items():
        print(f"  {name}")
        for turns, (seconds, cpu, stored) in by_length.items():
            line = f"    {turns:>6} turns: {seconds * 1e6:9.1f} µs/turn (CPU {cpu * 1e6:7.1f})"
            if name != "in memory":
                line += f", {stored:12,.0f} bytes stored/turn"
            print(line)
        (t0, c0, b0), (t1, c1, b1) = by_length[first], by_length[last]
        ratio = f"    {last} vs {first} turns: time/turn {t1 / t0:.2f}x (CPU {c1 / c0:.2f}x)"
        if name != "in memory":
            ratio += f", bytes/turn {b1 / b0:.2f}x"
        print(ratio)
    print("  target: each store's figures at the longest length within 1.3x of the shortest's")


if __name__ == "__main__":
    main()
