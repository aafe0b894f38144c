"""
What an MCP tool costs against a local one: the same ``echo`` behind the same engine, in process and over stdio.

Not a test: it prints milliseconds and ratios. Three figures, each the
median of ``--calls`` calls:

* the handler alone: a Python function, against ``tools/call`` to a server
  process (the SDK's client and server, JSON-RPC over a pipe, the adapter's
  thread hand-off, the result made safe: redacted and size-checked);
* a whole run of one call and an answer (``Agent.run``): what a user sees;
* the same run with the progress sink set (``on_event``), which asks the
  server for progress notifications.

    python bench/bench_mcp.py [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_fsm import Agent, ScriptedModel, ToolContext, ToolSpec, answer_message, tool_call_message
from agent_fsm.mcp import MCPServer

SERVER = Path(__file__).with_name("mcp_echo_server.py")


def _median_ms(work: Callable[[], Any], calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _run(tools: dict[str, ToolSpec] | Any, **options: Any) -> Callable[[], Any]:
    def once() -> Any:
        model = ScriptedModel([tool_call_message("c1", "echo", {"text": "hello"}), answer_message("hello")])
        result = Agent(model, tools).run("say hello", **options)
        assert result.state.observations[0].ok, result.state.observations[0]

    return once


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per figure (the median is reported)")
    calls = parser.parse_args().calls
    local = {"echo": ToolSpec("Say the text back.", {"text": str}, lambda text: text)}
    started = time.perf_counter()
    with MCPServer.stdio(sys.executable, [str(SERVER)]) as server:
        opened = time.perf_counter() - started
        remote = server.tools()
        context = ToolContext("bench", "c1", "key")
        rows = [
            (
                "handler alone",
                lambda: local["echo"].handler(text="hello"),
                lambda: remote["echo"].handler(context=context, text="hello"),
            ),
            ("a run of one call", _run(local), _run(remote)),
            (
                "a run, with on_event",
                _run(local, on_event=lambda e: None),
                _run(server.tools(on_event=lambda e: None), on_event=lambda e: None),
            ),
        ]
        print(f"server started and listed in {opened:.2f}s (once per connection)")
        print(f"{'':<24}{'local ms':>10}{'MCP ms':>10}{'ratio':>10}")
        for name, fast, slow in rows:
            for work in (fast, slow):
                work()  # warm
            a, b = _median_ms(fast, calls), _median_ms(slow, calls)
            print(f"{name:<24}{a:>10.3f}{b:>10.3f}{b / a:>9.0f}x")


if __name__ == "__main__":
    main()
