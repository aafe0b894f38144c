"""
Many over-reach runs at once in one event loop, every model call an ``asyncio.sleep``.

What an async service does: a thousand runs in flight, each waiting on the
network most of the time. Each entry runs the same scripted work as in the
per-run table; what differs is how it waits. Figures per round: wall time
(so runs/s) and the process's CPU time (``time.process_time``, every thread
included) per run. Rounds are interleaved, entries in an order that rotates
from round to round, and each figure is the median over rounds; ratios are
taken within a round, then their median, so load that comes and goes on a
shared machine weighs on both sides alike.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import statistics
import time
import weakref
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .contestants.agent_fsm_ import arun_agent_fsm, run_agent_fsm
from .contestants.bare import arun_bare
from .contestants.langgraph_ import arun_langgraph
from .scenarios import LATENCY, Job, Mismatch, Outcome, new_job, scenarios, verify

REFUND = [{"order_id": "A-17", "refunded_cents": 4999}]


async def _in_thread(job: Job) -> Outcome:
    # asyncio's default executor: min(32, cores + 4) threads, 6 on 2 cores.
    return await asyncio.to_thread(run_agent_fsm, job)


POOL_THREADS = 32


async def _in_pool(job: Job) -> Outcome:
    """The sync run on a wider pool, as a service tuned for blocking calls would; one pool per event loop."""
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:
        pool = _POOLS[loop] = ThreadPoolExecutor(POOL_THREADS)
        loop.set_default_executor(pool)  # shut down with the loop by asyncio.run
    return await loop.run_in_executor(pool, run_agent_fsm, job)


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ThreadPoolExecutor] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Entry:
    """One way of running the over-reach scenario on asyncio."""

    key: str
    name: str
    run: Callable[[Job], Coroutine[Any, Any, Outcome]]
    available: Callable[[], bool] = lambda: True
    missing: str = ""


ENTRIES = [
    Entry("bare", "bare loop, async", arun_bare),
    Entry("agent_fsm", "agent_fsm arun", arun_agent_fsm),
    Entry(
        "langgraph",
        "LangGraph ainvoke",
        arun_langgraph,
        lambda: importlib.util.find_spec("langgraph") is not None,
        "langgraph is not installed (pip install -e '.[bench]')",
    ),
    Entry("to_thread", "agent_fsm run in asyncio.to_thread", _in_thread),
    Entry("pool", f"agent_fsm run, {POOL_THREADS}-thread pool", _in_pool),
]


def verify_entries(entries: Sequence[Entry]) -> None:
    """
    One run per entry, the model sleeping as when timed, compared in full with agent_fsm's sync run.

    Raises:
        Mismatch: the first entry whose ending, effects or record differ.
    """
    scenario = scenarios(1)[0]
    want = run_agent_fsm(new_job(scenario))
    for entry in entries:
        got = asyncio.run(entry.run(new_job(scenario, LATENCY)))
        verify(want, got, entry.name, f"{scenario.title}, {LATENCY * 1e3:.0f} ms per model call")


def many_at_once(entry: Entry, count: int) -> tuple[float, float]:
    """Wall seconds and CPU seconds for ``count`` runs gathered in one fresh event loop; every run is checked."""
    scenario = scenarios(1)[0]
    jobs = [new_job(scenario, LATENCY) for _ in range(count)]  # built before the clocks start
    gc.collect()

    async def everything() -> tuple[float, float, list[Outcome]]:
        wall, cpu = time.perf_counter(), time.process_time()
        outcomes = await asyncio.gather(*(entry.run(job) for job in jobs))
        return time.perf_counter() - wall, time.process_time() - cpu, outcomes

    wall, cpu, outcomes = asyncio.run(everything())
    if len(outcomes) != count:
        raise Mismatch(f"{entry.name}: {len(outcomes)} of {count} runs finished")
    for outcome in outcomes:
        if outcome.stop != "answered" or outcome.effects != REFUND:
            raise Mismatch(f"{entry.name}: a run ended {outcome.stop} with effects {outcome.effects}")
    return wall, cpu


@dataclass(frozen=True)
class Figures:
    """One entry's medians over the rounds."""

    name: str
    wall: float  # seconds for all the runs
    cpu_per_run: float  # seconds
    runs_per_second: float


def measure(
    entries: Sequence[Entry], count: int, rounds: int
) -> tuple[dict[str, Figures], dict[tuple[str, str], float]]:
    """
    Every entry's median figures, and the median within-round ratio of runs/s for every pair of entries.

    ``ratios[a, b]`` is how many times ``a``'s runs/s is ``b``'s.
    """
    walls: dict[str, list[float]] = {e.key: [] for e in entries}
    cpus: dict[str, list[float]] = {e.key: [] for e in entries}
    for index in range(rounds):
        shift = index % len(entries)
        for entry in [*entries[shift:], *entries[:shift]]:
            wall, cpu = many_at_once(entry, count)
            walls[entry.key].append(wall)
            cpus[entry.key].append(cpu)
    figures = {
        e.key: Figures(
            e.name,
            statistics.median(walls[e.key]),
            statistics.median(cpus[e.key]) / count,
            statistics.median(count / w for w in walls[e.key]),
        )
        for e in entries
    }
    ratios = {
        (a.key, b.key): statistics.median(wb / wa for wa, wb in zip(walls[a.key], walls[b.key]))
        for a in entries
        for b in entries
    }
    return figures, ratios
