"""
What durability costs: the over-reach run in memory, and checkpointed to SQLite on local disk and to PostgreSQL.

Not a test: it prints times and the ratios (the target is at most 1.5x for
SQLite). The stored run commits four times: when it begins, the refund's
intent before its handler, the refund's observation, and the ending. Each
contender runs against fresh desks and models, interleaved round by round so
machine noise hits all alike; the median round is reported, with the bytes
each run wrote to the store's tables (statement parameters, a measure of
what a commit writes, not of the database's own pages).

With ``--postgres``, a throw-away PostgreSQL server is started on loopback
(``tests/postgres_server.py``'s, but with ``fsync`` on, as a server should
run) and the run is also checkpointed there, one connection per store.

    python bench/bench_checkpoint.py [--rounds 15] [--runs 200] [--synchronous NORMAL|FULL] [--postgres]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' PostgreSQL server helper

from agent_fsm import run
from agent_fsm.examples.demo import TASK, overreaching_model
from agent_fsm.examples.support_desk import make_support_desk, refund_gate
from agent_fsm.store import PostgresStore, SqliteStore
from agent_fsm.store.sql import SqlStore
from tests.postgres_server import INSTALL_HINT, PostgresServer, find_bin


def _bytes_written(store: SqlStore) -> list[int]:
    """From now on, the text and bytes each write statement of ``store`` is given, summed per transaction."""
    counted: list[int] = []
    opened = store._transaction

    class Counting:
        def __init__(self, tx: Any) -> None:
            self.tx, self.total = tx, 0

        def run(self, sql: str, params: Any = ()) -> int:
            self.total += sum(len(p) for p in params if isinstance(p, str | bytes))
            result: int = self.tx.run(sql, params)
            return result

        def rows(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
            found: list[tuple[Any, ...]] = self.tx.rows(sql, params)
            return found

    @contextmanager
    def counting(*, write: bool = True, single: bool = False) -> Iterator[Any]:
        with opened(write=write, single=single) as tx:
            wrapped = Counting(tx)
            yield wrapped
        if write:
            counted.append(wrapped.total)

    store._transaction = counting  # type: ignore[method-assign]
    return counted


class _DurablePostgres(PostgresServer):
    """The tests' throw-away server, but flushing its log to disk at every commit (fsync on), as in production."""

    def start(self) -> _DurablePostgres:
        self._run(str(self.bin_dir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "agent_fsm")
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "start",
        )
        return self


def _round(runs: int, store: SqlStore | None, offset: int) -> float:
    desks = [make_support_desk() for _ in range(runs)]
    models = [overreaching_model() for _ in range(runs)]
    gc.collect()
    start = time.perf_counter()
    for i, (desk, model) in enumerate(zip(desks, models)):
        if store is None:
            run(TASK, model, desk.tools, gate=refund_gate)
        else:
            run(TASK, model, desk.tools, gate=refund_gate, store=store, run_id=f"r{offset + i}")
    return (time.perf_counter() - start) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=200, help="runs per round")
    parser.add_argument("--synchronous", default="NORMAL", help="SQLite's synchronous setting (FULL: flush per commit)")
    parser.add_argument("--postgres", action="store_true", help="also checkpoint to a throw-away PostgreSQL server")
    args = parser.parse_args()
    server = None
    if args.postgres:
        found = find_bin()
        if found is None:
            raise SystemExit(INSTALL_HINT)
        server = _DurablePostgres(found).start()
    try:
        with tempfile.TemporaryDirectory(prefix=".agent-fsm-bench-", dir=Path.cwd()) as folder:  # local disk, not RAM
            stores: dict[str, SqlStore] = {
                "SQLite on disk": SqliteStore(Path(folder) / "runs.db", synchronous=args.synchronous)
            }
            if server is not None:
                stores["PostgreSQL"] = PostgresStore(server.new_database())
            written = {name: _bytes_written(store) for name, store in stores.items()}
            times: dict[str, list[float]] = {"in memory": [], **{name: [] for name in stores}}
            for r in range(args.rounds):
                times["in memory"].append(_round(args.runs, None, 0))
                for name, store in stores.items():
                    times[name].append(_round(args.runs, store, r * args.runs))
            first = next(iter(stores.values()))
            commits = first.load("r0").summary.version
            print(
                f"over-reach run, {args.runs} runs x {args.rounds} rounds, {commits} commits a run;"
                f" SQLite synchronous={args.synchronous}" + ("; PostgreSQL fsync on, loopback" if server else "")
            )
            memory, fastest = statistics.median(times["in memory"]), min(times["in memory"])
            print(f"  {'in memory':16} {memory * 1e6:9.1f} µs/run (median round; fastest {fastest * 1e6:.1f})")
            for name, store in stores.items():
                median = statistics.median(times[name])
                per_run = sum(written[name]) / (args.runs * args.rounds)
                print(
                    f"  {name:16} {median * 1e6:9.1f} µs/run (median round; fastest {min(times[name]) * 1e6:.1f}),"
                    f" {median / memory:.2f}x median, {min(times[name]) / min(times['in memory']):.2f}x fastest;"
                    f" {per_run:,.0f} bytes written a run"
                )
                store.close()
            print("  target: SQLite at most 1.5x the in-memory run")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
