"""
The cost of one nesting level: the same scripted work run flat, inside one ``as_tool`` level, and inside two.

Not a test: it prints figures. The work is a worker agent making ``W``
model calls (a read-only lookup on each, then an answer). Run flat, the
worker is the top agent; nested, a parent whose script delegates once and
answers runs it as a tool (one level), or a parent runs a middle agent that
runs it (two levels). Rounds are interleaved (flat, one level, two levels,
again) and each figure is the median round. Two costs are separated:

* per work turn, all in: (nested run - flat run) / W, the delegation's own
  two parent turns and the child's start and end amortised over the work;
* per work turn, marginal: the slope of that difference between a short and
  a long piece of work, which leaves the fixed costs out: what each turn of
  a nested run pays for passing through one more level of driver.

    python bench/nesting.py [--rounds 15] [--runs 20] [--short 10] [--long 60]
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

from agent_fsm import Agent, Limits, ScriptedModel, ToolSpec, Verdict, answer_message, tool_call_message

LIMITS = Limits(max_turns=10_000, max_prompt_tokens=10**9)


def _allow(call: Any) -> Verdict:
    return Verdict("allow", "benchmark")


def _lookup(key: str) -> dict[str, str]:
    return {"key": key, "status": "shipped"}


LOOKUP = ToolSpec(
    "Look an order up.",
    {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"], "additionalProperties": False},
    _lookup,
)


def worker(work: int) -> Agent:
    """``work`` model calls: ``work - 1`` lookups, then the answer."""
    script = [tool_call_message(f"l{i}", "lookup", {"key": f"A-{i}"}) for i in range(work - 1)]
    script.append(answer_message("all shipped"))
    return Agent(ScriptedModel(script), {"lookup": LOOKUP}, gate=_allow, limits=LIMITS, name="worker")


def wrapped(inner: Agent, name: str) -> Agent:
    """An agent that delegates once to ``inner`` and answers: two model calls of its own."""
    script = [tool_call_message("d", inner.name or "inner", {"task": "check every order"}), answer_message("done")]
    tools = {inner.name or "inner": inner.as_tool()}
    return Agent(ScriptedModel(script), tools, gate=_allow, limits=LIMITS, name=name)


def shapes(work: int) -> dict[str, Agent]:
    """The same work flat, one level down and two levels down."""
    flat = worker(work)
    one = wrapped(flat, "parent")
    two = wrapped(wrapped(flat, "middle"), "parent")
    return {"flat": flat, "1 level": one, "2 levels": two}


def check(agents: dict[str, Agent], work: int) -> None:
    """Every shape does the same work: the same answer from the worker, with ``work`` model calls of it."""
    for name, agent in agents.items():
        result = agent.run("task")
        state = result.state
        while state.agent != "worker":
            state = next(iter(state.children.values()))
        assert state.answer == "all shipped" and state.turns == work, (name, state.turns)


def _timed(run: Callable[[], Any], runs: int) -> float:
    gc.collect()
    start = time.perf_counter()
    for _ in range(runs):
        run()
    return (time.perf_counter() - start) / runs


def measure(work: int, rounds: int, runs: int) -> dict[str, float]:
    """Median seconds per run of each shape, rounds interleaved."""
    agents = shapes(work)
    check(agents, work)
    times: dict[str, list[float]] = {name: [] for name in agents}
    for _ in range(rounds):
        for name, agent in agents.items():
            times[name].append(_timed(lambda agent=agent: agent.run("task"), runs))
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=20, help="runs per round and shape")
    parser.add_argument("--short", type=int, default=10, help="model calls of the short piece of work")
    parser.add_argument("--long", type=int, default=60, help="model calls of the long piece of work")
    args = parser.parse_args()
    print(f"nesting cost, {args.rounds} interleaved rounds x {args.runs} runs; Python {platform.python_version()}")
    medians = {work: measure(work, args.rounds, args.runs) for work in (args.short, args.long)}
    for work, figures in medians.items():
        flat = figures["flat"]
        print(f"  work of {work} model calls:")
        for name, seconds in figures.items():
            extra = (seconds - flat) / work
            print(
                f"    {name:9} {seconds * 1e3:8.2f} ms/run  {seconds / flat:5.2f}x flat"
                f"  {extra * 1e6:+7.1f} µs per work turn all in"
            )
    span = args.long - args.short
    short_turn = medians[args.short]["flat"] / args.short
    for levels, name in ((1, "1 level"), (2, "2 levels")):
        short, long = (medians[w][name] - medians[w]["flat"] for w in (args.short, args.long))
        slope = (long - short) / span / levels
        fixed = (short / levels) - slope * args.short
        print(
            f"  per level ({name}): fixed {fixed * 1e6:+.0f} µs (= {fixed / short_turn:.1f} flat turns of"
            f" {short_turn * 1e6:.0f} µs: the delegating agent's two model calls, the child's start and end);"
            f" marginal {slope * 1e6:+.1f} µs per work turn ({slope / short_turn * 100:+.1f}% of a flat turn)"
        )


if __name__ == "__main__":
    main()
