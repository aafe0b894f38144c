"""
Three effect-free calls of 300 ms each in one reply: one by one against ``Agent(parallel_calls=True)``.

Run ``PYTHONPATH=. python bench/parallel_calls.py``. Prints, for the sync
driver (worker threads) and the async driver (tasks; plain handlers in
worker threads), the wall time of a run making those three calls and
answering, with and without the option, and their ratio. A benchmark,
not a test: it asserts nothing.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from agent_fsm import Agent, ScriptedModel, ToolSpec, answer_message

DELAY = 0.3
ROUNDS = 5


def _reply() -> dict[str, Any]:
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps({"key": key})}}
        for i, (name, key) in enumerate([("look", "a"), ("alook", "b"), ("look", "c")])
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def look(key: str) -> str:
    time.sleep(DELAY)
    return key


async def alook(key: str) -> str:
    await asyncio.sleep(DELAY)
    return key


def _agent(parallel: bool, asynchronous: bool) -> Agent:
    second = ToolSpec("Look up (async).", {"key": str}, alook) if asynchronous else None
    tools = {"look": ToolSpec("Look up.", {"key": str}, look), "alook": second or ToolSpec("Look.", {"key": str}, look)}
    return Agent(ScriptedModel([_reply(), answer_message("done")]), tools, parallel_calls=parallel)


def _timed(parallel: bool, asynchronous: bool) -> float:
    agent = _agent(parallel, asynchronous)
    start = time.perf_counter()
    task = "look up a, b and c"
    result = asyncio.run(agent.arun(task)) if asynchronous else agent.run(task)
    elapsed = time.perf_counter() - start
    assert result.stop.value == "answered" and [o.content for o in result.state.observations] == ["a", "b", "c"]
    return elapsed


def main() -> None:
    print(f"three effect-free calls of {DELAY * 1000:.0f} ms in one reply, median of {ROUNDS} runs")
    for driver, asynchronous in (("sync (run)", False), ("async (arun)", True)):
        one_by_one = statistics.median(_timed(False, asynchronous) for _ in range(ROUNDS))
        together = statistics.median(_timed(True, asynchronous) for _ in range(ROUNDS))
        print(
            f"{driver:13} one by one {one_by_one * 1000:6.0f} ms   parallel_calls {together * 1000:6.0f} ms"
            f"   ratio {one_by_one / together:.2f}x"
        )


if __name__ == "__main__":
    main()
