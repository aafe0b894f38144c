"""
CPU per run as more runs are in flight at once: does a server's cost per run stay flat?

Not a test: it prints figures. Each run makes three model calls (5 ms each,
awaited) and two tool calls; N runs go at once with ``agent.arun`` in one
process and one loop. Printed for each N: CPU microseconds per run
(``time.process_time``) with the collector as it is, with the start-up
objects frozen out of its sight (``gc.freeze()``), as ``agent-fsm serve`` sets
it after start-up (``settle_gc``: frozen, and ``GC_THRESHOLD``), and with the collector off
(the floor), and the ratio of the largest N's cost to the smallest's.

    python bench/flat_cost.py                      # 1,000, 5,000 and 20,000 runs (a few minutes)
    python bench/flat_cost.py --sizes 1000,5000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from agent_fsm import Agent, ToolSpec, answer_message, tool_call_message  # noqa: E402
from agent_fsm.serve import settle_gc  # noqa: E402

LATENCY = 0.005


class ThreeCalls:
    """Two lookups, then an answer; each reply awaited for ``LATENCY`` seconds. Reads the transcript only."""

    async def achat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        await asyncio.sleep(LATENCY)
        done = sum(1 for m in messages if m.get("role") == "tool")
        if done < 2:
            return tool_call_message(f"c{done}", "lookup", {"key": f"k{done}"})
        return answer_message("done")

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        raise AssertionError("the bench awaits achat")


def _agent() -> Agent:
    return Agent(ThreeCalls(), {"lookup": ToolSpec("Look a key up.", {"key": str}, lambda key: {"key": key})})


async def _batch(agent: Agent, n: int) -> float:
    cpu = time.process_time()
    results = await asyncio.gather(*(agent.arun(f"task {i}") for i in range(n)))
    used = time.process_time() - cpu
    assert all(r.answer == "done" for r in results)
    return used / n * 1e6


def _measure(n: int, mode: str) -> float:
    agent = _agent()
    gc.collect()
    threshold = gc.get_threshold()
    if mode == "frozen":
        gc.freeze()
    elif mode == "serve":
        settle_gc()
    elif mode == "off":
        gc.disable()
    try:
        return asyncio.run(_batch(agent, n))
    finally:
        gc.enable()
        gc.set_threshold(*threshold)
        gc.unfreeze()
        gc.collect()


def main() -> None:
    """Measure each size in each mode; print µs of CPU per run and the largest-to-smallest ratio."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,5000,20000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    _measure(200, "as-is")  # warm up imports and caches
    print(
        f"CPU µs per run, three 5 ms model calls a run, N runs at once (agent.arun, one loop); {sys.version.split()[0]}"
    )
    for mode in ("as-is", "frozen", "serve", "off"):
        costs = [_measure(n, mode) for n in sizes]
        cells = "  ".join(f"N={n}: {c:6.1f}" for n, c in zip(sizes, costs, strict=True))
        print(f"  gc {mode:6}: {cells}   ratio {costs[-1] / costs[0]:.2f}x")


if __name__ == "__main__":
    main()
