"""
What durability costs: the over-reach run in memory, and checkpointed to SQLite on local disk and to PostgreSQL.

Not a test: it prints times and the ratios (the target is at most 1.5x for
SQLite). The stored run commits four times: when it begins, the refund's
intent before its handler, the refund's observation, and the ending. Each
contender runs against fresh desks and models, interleaved round by round so
machine noise hits all alike; the median round is reported. Two more lines
say where the time goes: "checkpoint calls" is the run handing its state to
a checkpointer that keeps nothing (the engine's own share of durability),
"store, no database" is the SQL store with every statement a no-op (the
store's own Python work: what it serializes and checks per commit), and
"SQLite alone" replays, with ``sqlite3`` and nothing else, the
very statements and parameters one stored run sent (a fresh run id each
time): what the database itself costs for those commits, the floor any
store writing them pays. The
bytes each run writes to the store's tables (statement parameters, a measure
of what a commit writes, not of the database's own pages) are counted in
separate runs after the timed rounds, so the counting costs no timed round
anything.

With ``--postgres``, a throw-away PostgreSQL server is started on loopback
(``tests/postgres_server.py``'s, but with ``fsync`` on, as a server should
run) and the run is also checkpointed there, one connection per store.

    python bench/bench_checkpoint.py [--rounds 15] [--runs 200] [--synchronous NORMAL|FULL] [--postgres]
"""

from __future__ import annotations

import argparse
import gc
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


class _KeepsNothing:
    """A checkpointer that stores nothing: what the engine itself does for a stored run."""

    owner = "nobody"

    def begin(self, run_id: str, state: Any) -> None:
        """Nothing is recorded."""

    def save(self, run_id: str, state: Any, intent: Any = None) -> None:
        """Nothing is committed."""


class _NoStatement:
    def run(self, sql: str, params: Any = ()) -> int:
        return 1  # every compare-and-set "succeeds"

    def rows(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        return []


def _no_database(store: SqlStore) -> SqlStore:
    """``store`` with every statement a no-op: the store's own work per commit, without the database's."""

    @contextmanager
    def transaction(*, write: bool = True, single: bool = False) -> Iterator[Any]:
        yield _NoStatement()

    store._transaction = transaction  # type: ignore[method-assign]
    return store


def _recorded(store: SqliteStore, run_id: str) -> list[list[tuple[str, tuple[Any, ...]]]]:
    """The statements and parameters of each transaction of one stored run (begin to end), as sent to SQLite."""
    transactions: list[list[tuple[str, tuple[Any, ...]]]] = []
    opened = store._transaction

    class Recording:
        def __init__(self, tx: Any) -> None:
            self.tx = tx
            self.sent: list[tuple[str, tuple[Any, ...]]] = []

        def run(self, sql: str, params: Any = ()) -> int:
            self.sent.append((sql, tuple(params)))
            result: int = self.tx.run(sql, params)
            return result

        def rows(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
            self.sent.append((sql, tuple(params)))
            found: list[tuple[Any, ...]] = self.tx.rows(sql, params)
            return found

    @contextmanager
    def recording(*, write: bool = True, single: bool = False) -> Iterator[Any]:
        with opened(write=write, single=single) as tx:
            wrapped = Recording(tx)
            yield wrapped
        transactions.append(wrapped.sent)

    store._transaction = recording  # type: ignore[method-assign]
    try:
        run(TASK, overreaching_model(), make_support_desk().tools, gate=refund_gate, store=store, run_id=run_id)
    finally:
        store._transaction = opened  # type: ignore[method-assign]
    return transactions


def _replay_round(
    runs: int, connection: sqlite3.Connection, transactions: list[list[tuple[str, tuple[Any, ...]]]], offset: int
) -> float:
    """The recorded transactions sent again per run (its id swapped in), each BEGIN IMMEDIATE ... COMMIT."""
    recorded_id = "recorded"
    scripts = [
        [
            [(sql, tuple(f"p{offset + i}" if p == recorded_id else p for p in params)) for sql, params in tx]
            for tx in transactions
        ]
        for i in range(runs)
    ]
    execute = connection.execute
    gc.collect()
    start = time.perf_counter()
    for script in scripts:
        for tx in script:
            execute("BEGIN IMMEDIATE")
            for sql, params in tx:
                execute(sql, params).fetchall()
            execute("COMMIT")
    return (time.perf_counter() - start) / runs


def _round(runs: int, store: Any, offset: int) -> float:
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


@dataclass(frozen=True)
class Compared:
    """Seconds per run of each contender in each round ("in memory" first), and bytes each store writes a run."""

    times: dict[str, list[float]]
    written: dict[str, float]
    commits: int  # commits of one stored run
    stores: tuple[str, ...]  # the contenders that are real stores


def compare(
    rounds: int, runs: int, *, synchronous: str = "NORMAL", postgres: bool = False, parts: bool = True
) -> Compared:
    """
    Time the over-reach run in memory and checkpointed, ``runs`` runs per contender per round, interleaved.

    ``parts`` adds the contenders that say where a stored run's time goes (checkpoint calls, the store with
    no database, SQLite alone); ``postgres`` starts a throw-away server with fsync on and adds it.

    Raises:
        SystemExit: ``postgres`` was asked for and no PostgreSQL binaries were found.
    """
    server = None
    if postgres:
        found = find_bin()
        if found is None:
            raise SystemExit(INSTALL_HINT)
        server = PostgresServer(found, durable=True).start()  # fsync on, as in production
    try:
        with tempfile.TemporaryDirectory(prefix=".agent-fsm-bench-", dir=Path.cwd()) as folder:  # local disk, not RAM
            stores: dict[str, SqlStore] = {
                "SQLite on disk": SqliteStore(Path(folder) / "runs.db", synchronous=synchronous)
            }
            if server is not None:
                stores["PostgreSQL"] = PostgresStore(server.new_database())
            contenders: dict[str, Any] = {"in memory": None}
            replayed, transactions = None, []
            if parts:
                replayed = SqliteStore(Path(folder) / "replayed.db", synchronous=synchronous)
                transactions = _recorded(replayed, "recorded")
                contenders["checkpoint calls"] = _KeepsNothing()
                contenders["store, no database"] = _no_database(SqliteStore(Path(folder) / "unused.db"))
                contenders["SQLite alone"] = replayed
            contenders.update(stores)
            names = list(contenders)
            times: dict[str, list[float]] = {name: [] for name in names}
            for r in range(rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:  # each round in another order
                    if replayed is not None and contenders[name] is replayed:
                        times[name].append(_replay_round(runs, replayed._connection, transactions, r * runs))
                    else:
                        times[name].append(_round(runs, contenders[name], r * runs))
            counted = {name: _bytes_written(store) for name, store in stores.items()}
            for store in stores.values():
                _round(runs, store, rounds * runs)
            commits = next(iter(stores.values())).load("r0").summary.version
            for store in stores.values():
                store.close()
            if replayed is not None:
                replayed.close()
            written = {name: sum(counted[name]) / runs for name in stores}
            return Compared(times, written, commits, tuple(stores))
    finally:
        if server is not None:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=200, help="runs per round")
    parser.add_argument("--synchronous", default="NORMAL", help="SQLite's synchronous setting (FULL: flush per commit)")
    parser.add_argument("--postgres", action="store_true", help="also checkpoint to a throw-away PostgreSQL server")
    args = parser.parse_args()
    found = compare(args.rounds, args.runs, synchronous=args.synchronous, postgres=args.postgres)
    times = found.times
    print(
        f"over-reach run, {args.runs} runs x {args.rounds} rounds, {found.commits} commits a run;"
        f" SQLite synchronous={args.synchronous}" + ("; PostgreSQL fsync on, loopback" if args.postgres else "")
    )
    memory, fastest = statistics.median(times["in memory"]), min(times["in memory"])
    print(f"  {'in memory':18} {memory * 1e6:9.1f} µs/run (median round; fastest {fastest * 1e6:.1f})")
    for name in list(times)[1:]:
        median = statistics.median(times[name])
        line = (
            f"  {name:18} {median * 1e6:9.1f} µs/run (median round; fastest {min(times[name]) * 1e6:.1f}),"
            f" {median / memory:.2f}x median, {min(times[name]) / min(times['in memory']):.2f}x fastest"
        )
        if name in found.stores:
            line += f"; {found.written[name]:,.0f} bytes written a run"
        print(line)
    print("  target: SQLite at most 1.5x the in-memory run")


if __name__ == "__main__":
    main()
