"""
What durability costs: the over-reach run in memory against the same run checkpointed to SQLite on local disk.

Not a test: it prints times and the ratio (the target is at most 2x). The
stored run commits four times: when it begins, the refund's intent before
its handler, the refund's observation, and the ending. Each contender runs
against fresh desks and models, interleaved round by round so machine noise
hits both alike; the median round is reported.

    python bench/bench_checkpoint.py [--rounds 15] [--runs 200] [--synchronous NORMAL|FULL]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from pathlib import Path

from agent_fsm import run
from agent_fsm.examples.demo import TASK, overreaching_model
from agent_fsm.examples.support_desk import make_support_desk, refund_gate
from agent_fsm.store import SqliteStore


def _round(runs: int, store: SqliteStore | None, offset: int) -> float:
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=".agent-fsm-bench-", dir=Path.cwd()) as folder:  # local disk, not RAM
        store = SqliteStore(Path(folder) / "runs.db", synchronous=args.synchronous)
        memory, stored = [], []
        for r in range(args.rounds):
            memory.append(_round(args.runs, None, 0))
            stored.append(_round(args.runs, store, r * args.runs))
        m, s = statistics.median(memory), statistics.median(stored)
        commits = store.load("r0").summary.version
        print(f"over-reach run, {args.runs} runs x {args.rounds} rounds, SQLite synchronous={args.synchronous}")
        print(f"  in memory        {m * 1e6:9.1f} µs/run (median round; fastest {min(memory) * 1e6:.1f})")
        print(
            f"  SQLite on disk   {s * 1e6:9.1f} µs/run (median round; fastest {min(stored) * 1e6:.1f}),"
            f" {commits} commits"
        )
        print(
            f"  ratio            {s / m:9.2f}x  median, {min(stored) / min(memory):.2f}x fastest (target: at most 2x)"
        )
        store.close()


if __name__ == "__main__":
    main()
