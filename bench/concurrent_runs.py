"""
A thousand over-reach runs at once on asyncio, each model call sleeping 5 ms: agent_fsm, a bare loop, LangGraph.

Not a test: it prints figures. In one process and one event loop per batch:

* a bare async loop doing the same work as the sync bare loop of
  ``peers.py`` (the same checks, gate, handlers and effect log), awaiting
  ``model.achat``;
* ``agent_fsm.arun``;
* LangGraph's ``ainvoke`` on the graph ``peers.py`` times, every node and
  router an ``async def``;
* for reference, the sync ``agent_fsm.run`` in ``asyncio.to_thread`` (the
  default executor: six threads on two cores), and on a 32-thread pool.

Before anything is timed, each entry runs once and its ending, effect log,
transcript, observations and prompt-size log are compared with agent_fsm's
sync run; every timed run's ending and effects are checked too. Printed:
runs/s, CPU ms per run (``time.process_time``), and ratios of runs/s taken
within each round (medians of interleaved rounds).

    pip install -e '.[bench]'
    python bench/concurrent_runs.py            # one to two minutes
    python bench/concurrent_runs.py --quick    # a few seconds, noisier

(Not ``concurrent.py``: run as a script, bench/ comes first on the import
path, and that name would hide the standard library's ``concurrent``.)
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Sequence

from peerbench.async_runs import ENTRIES, measure, verify_entries
from peerbench.machine import machine_line, versions
from peerbench.scenarios import LATENCY

# (entry, against, the target for the ratio of their runs/s, if any)
TARGETS = [
    ("agent_fsm", "bare", 0.8),
    ("agent_fsm", "langgraph", 10.0),
    ("agent_fsm", "to_thread", None),
    ("agent_fsm", "pool", None),
]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 runs at once, 3 rounds")
    parser.add_argument("--runs", type=int, help="runs at once (default 1000, quick 200)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5, quick 3)")
    args = parser.parse_args(argv)
    count = args.runs or (200 if args.quick else 1000)
    rounds = args.rounds or (3 if args.quick else 5)

    entries = [e for e in ENTRIES if e.available()]
    print(f"machine: {machine_line()}")
    print(f"versions: {versions()}")
    for entry in ENTRIES:
        if entry not in entries:
            print(f"skipped: {entry.name}: {entry.missing}")
    started = time.perf_counter()
    verify_entries(entries)
    print("verified: every entry ends, acts and records exactly as agent_fsm's sync run does\n")
    gc.collect()
    gc.freeze()  # the frameworks' long-lived objects stay out of the collections the runs cause

    figures, ratios = measure(entries, count, rounds)
    ideal = 4 * LATENCY
    print(
        f"{count} concurrent over-reach runs, {LATENCY * 1e3:.0f} ms per model call"
        f" (4 calls: {ideal * 1e3:.0f} ms at best); medians of {rounds} interleaved rounds"
    )
    print(f"{'entry':38}{'wall ms':>10}{'runs/s':>10}{'CPU ms/run':>12}")
    for entry in entries:
        f = figures[entry.key]
        print(f"{f.name:38}{f.wall * 1e3:10.0f}{f.runs_per_second:10.0f}{f.cpu_per_run * 1e3:12.3f}")
    print()
    for a, b, target in TARGETS:
        if a in figures and b in figures:
            goal = f" (target: at least {target:g}x)" if target is not None else ""
            print(f"{figures[a].name} runs/s / {figures[b].name}: {ratios[a, b]:.2f}x{goal}")
    print(f"\n(total {time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
