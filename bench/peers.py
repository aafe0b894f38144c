"""
agent_fsm against a minimal bare loop and peer frameworks, on the same scripted work.

Not a test: it prints ratios. Three scripted support-desk scenarios run
through every contestant:

* ``overreach``: the model looks the order up, asks to refund 9999 cents, the
  gate denies, the model asks for 4999, the refund runs, the model answers;
* ``wanderer``: the model repeats one lookup for N turns and the run ends
  ``step_limit``, the prompt size counted incrementally on every turn;
* ``parallel``: one assistant message carries three calls, the middle one
  denied; the model then refunds what is allowed and answers.

The contestants are a minimal bare loop (key and type checks, incremental
token count, no schema library), agent_fsm, raw ``transitions`` on one shared
machine, LangGraph, Burr, pydantic-graph and python-statemachine. Every
hand-written contestant uses the same gate, handlers, parser and token
estimator, and the same states (ready, proposing, executing, denied and the
endings) in its framework's own idiom. Before anything is timed, each one's
ending, effect log, transcript, observations and prompt-size log are checked
against agent_fsm's; a mismatch stops the benchmark.

Timings are medians of interleaved rounds (background load hits every
contestant alike), reported as ratios to the bare loop. Also measured: the
memory a paused run retains, its saved size, ``to_json``/``from_json`` of
10,000 paused runs against plain ``json.dumps``/``json.loads`` of the same
data, ``import agent_fsm`` in a fresh process, and 1000 concurrent runs with
a 5 ms model latency (threads for the sync engines, asyncio for the
async-native ones).

    pip install -e '.[bench]'
    python bench/peers.py            # about 3 minutes
    python bench/peers.py --quick    # about 20 seconds

Peers that are not installed are skipped with a note. The parts live in
``peerbench/`` beside this script: scenarios, the shared hand-written work,
one module per contestant, verification and the measurements.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Sequence

from peerbench.contestants import CONTESTANTS, missing_peers
from peerbench.machine import machine_line, versions
from peerbench.measure import (
    measure_concurrency,
    measure_import,
    measure_memory,
    measure_serialization,
    time_scenario,
)
from peerbench.scenarios import LATENCY, scenarios
from peerbench.verification import reference, verify_all, verify_paused


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (about 20 s) with fewer rounds and runs")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per scenario (default 11, quick 3)")
    parser.add_argument("--turns", type=int, help="turns of the wanderer (default 200, quick 50)")
    parser.add_argument("--concurrent", type=int, help="runs at once in the concurrency test (default 1000, quick 200)")
    args = parser.parse_args(argv)
    quick = args.quick
    rounds = args.rounds or (3 if quick else 11)
    turns = args.turns or (50 if quick else 200)
    concurrent = args.concurrent or (200 if quick else 1000)
    sample = 0.01 if quick else 0.02
    paused = 1000 if quick else 10_000

    contestants = [c for c in CONTESTANTS if c.available]
    print(f"machine: {machine_line()}")
    print(f"versions: {versions()}")
    for package in missing_peers():
        print(f"skipped: {package} is not installed (pip install -e '.[bench]')")

    started = time.perf_counter()
    timed = scenarios(turns)
    for scenario in timed:
        verify_all(contestants, scenario)
    verify_paused()
    print("verified: every contestant ends, acts and records exactly as agent_fsm does on every scenario\n")
    # Every framework is imported and warmed up by now. Freezing those
    # long-lived objects keeps each batch's gc.collect() (and the collector's
    # own passes while a batch runs) to what the runs themselves allocate:
    # with the peers loaded, a full collection costs tens of milliseconds.
    gc.collect()
    gc.freeze()

    bare_seconds, ratios = {}, {}
    for scenario in timed:
        bare_seconds[scenario.key], ratios[scenario.key] = time_scenario(contestants, scenario, rounds, sample)
    print(f"[timed: {time.perf_counter() - started:.0f} s]", file=sys.stderr)
    turns_of = {s.key: len(reference(s).prompt_log) for s in timed}
    header = f"{'per run, ratio to the bare loop':32}" + "".join(f"{s.title:>30}" for s in timed)
    print(header)
    print("-" * len(header))
    for contestant in contestants:
        cells = "".join(f"{ratios[s.key][contestant.name]:29.2f}x" for s in timed)
        print(f"{contestant.name:32}{cells}")
    bare_us = "".join(f"{bare_seconds[s.key] / turns_of[s.key] * 1e6:28.1f}µs" for s in timed)
    print(f"{'(bare loop per turn)':32}{bare_us}")
    for peer in ("LangGraph", "Burr", "python-statemachine", "pydantic-graph", "transitions (shared machine)"):
        if peer in ratios[timed[0].key]:
            faster = ", ".join(f"{ratios[s.key][peer] / ratios[s.key]['agent_fsm']:.1f}x" for s in timed)
            print(f"agent_fsm is faster than {peer} by: {faster}")

    memory, states = measure_memory(paused)
    print(f"[memory: {time.perf_counter() - started:.0f} s]", file=sys.stderr)
    print(
        f"\npaused run retained (tracemalloc, {memory['count']:,} kept): agent_fsm {memory['engine']:,.0f} B,"
        f" bare loop {memory['bare']:,.0f} B ({memory['engine'] / memory['bare']:.2f}x);"
        f" {memory['count']:,} paused runs: agent_fsm {memory['engine'] * memory['count'] / 2**20:.1f} MiB,"
        f" bare loop {memory['bare'] * memory['count'] / 2**20:.1f} MiB"
    )
    print(
        f"saved size: agent_fsm to_json {memory['engine_saved']:,} B,"
        f" bare loop json.dumps {memory['bare_saved']:,} B ({memory['engine_saved'] / memory['bare_saved']:.2f}x)"
    )
    ser = measure_serialization(states, 3 if quick else 5)
    del states
    print(
        f"{ser['count']:,.0f} paused runs: to_json {ser['to_json'] * 1e3:.0f} ms,"
        f" json.dumps {ser['dumps'] * 1e3:.0f} ms"
        f" ({ser['write']:.2f}x); from_json {ser['from_json'] * 1e3:.0f} ms,"
        f" json.loads {ser['loads'] * 1e3:.0f} ms ({ser['read']:.2f}x)"
    )
    print(f"[serialization: {time.perf_counter() - started:.0f} s]", file=sys.stderr)
    imported = measure_import(3 if quick else 7)
    print(
        f"fresh process: import agent_fsm {imported['import'] * 1e3:.0f} ms"
        f" (fastest {imported['import_min'] * 1e3:.0f} ms); import and a first over-reach run"
        f" {imported['first_run'] * 1e3:.0f} ms (fastest {imported['first_run_min'] * 1e3:.0f} ms)"
    )

    print(f"[import: {time.perf_counter() - started:.0f} s]", file=sys.stderr)
    walls = measure_concurrency(contestants, concurrent, 1 if quick else 3)
    base = {how: next(w for n, h, w in walls if n.startswith("bare loop") and h == how) for _, how, _ in walls}
    ideal = 4 * LATENCY
    print(f"\n{concurrent} concurrent over-reach runs, 5 ms per model call (4 calls: {ideal * 1e3:.0f} ms at best)")
    print(f"{'contestant':32}{'how':>9}{'wall ms':>10}{'runs/s':>10}{'/ bare (threads)':>18}{'/ bare (same)':>15}")
    for name, how, wall in walls:
        print(
            f"{name:32}{how:>9}{wall * 1e3:10.0f}{concurrent / wall:10.0f}"
            f"{wall / base['threads']:17.2f}x{wall / base[how]:14.2f}x"
        )
    print(f"\n(total {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
