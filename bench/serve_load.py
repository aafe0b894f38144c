"""
Runs started and streamed through ``agent-fsm serve`` at once, against the same runs through the Python API.

Not a test: it prints figures. Each run pays one invoice of the ledger world
(four model calls, each sleeping 5 ms; three tool calls, two of them
effects), kept in a store. Through HTTP, every run is started with
``POST /runs`` and its events read with ``GET /runs/{id}/events`` by a
client of its own, all at once; printed are runs/s (first start to last
ending), the p50 and p99 time from a model's reply (the model stamps the time
it replied in the reply's text) to its arrival at the SSE client, and a check
that every run's events arrived in the order of their ids (``P.I``), none
missing or repeated, the ending last. Beside
it, the same runs with ``agent.arun`` in one process on the same kind of
store: the ratio of runs/s is the cost of serving.

    python bench/serve_load.py                                # SQLite, one process, 1,000 runs
    python bench/serve_load.py --backend postgres --processes 4
    python bench/serve_load.py --runs 200                     # quicker, noisier
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from agent_fsm import Agent  # noqa: E402
from agent_fsm.store import open_store  # noqa: E402
from tests.ledger_world import LedgerModel, ledger_tools, pay_gate, task_for  # noqa: E402
from tests.postgres_server import INSTALL_HINT, PostgresServer, find_bin  # noqa: E402
from tests.serve_process import serve_process  # noqa: E402

LATENCY = 0.005
TOKEN = "bench-token-0123456789abcdef"


class SlowLedgerModel(LedgerModel):
    """
    The ledger's model, each reply taking ``LATENCY`` seconds (slept in a thread, awaited on a loop).

    A reply proposing a call carries the time it was made as its text.
    """

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        time.sleep(LATENCY)
        return _stamped(super().chat(messages, tools))

    async def achat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        await asyncio.sleep(LATENCY)
        return _stamped(super().chat(messages, tools))


def _stamped(reply: dict[str, Any]) -> dict[str, Any]:
    return {**reply, "content": repr(time.time())} if reply.get("tool_calls") else reply


def agent() -> Agent:
    """The served agent: the ledger world's, its model 5 ms a reply, effects to ``AGENT_FSM_LEDGER``."""
    return Agent(SlowLedgerModel(), ledger_tools(Path(os.environ["AGENT_FSM_LEDGER"])), gate=pay_gate)


async def _one(http: httpx.AsyncClient, base: str, i: int, latencies: list[float]) -> str | None:
    """Start one run and read its events to the end; None if they came whole and in order, else what was wrong."""
    started = await http.post(f"{base}/runs", json={"task": task_for([f"A-{i}"])})
    if started.status_code != 202:
        return f"start: {started.status_code} {started.text[:200]}"
    run_id = started.json()["run_id"]
    ids: list[tuple[int, int]] = []
    last: dict[str, Any] = {}
    async with http.stream("GET", f"{base}/runs/{run_id}/events") as response:
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                point, _, index = line[4:].partition(".")
                ids.append((int(point), int(index)))
            elif line.startswith("data: "):
                last = json.loads(line[6:])
                if last["type"] == "model_replied" and last["calls"]:
                    latencies.append(time.time() - float(last["text"]))
    if ids != sorted(set(ids)) or ids[:1] != [(1, 0)] or last.get("type") != "ended" or last.get("stop") != "answered":
        return f"run {run_id}: ids {ids[:5]}... ending {last.get('type')}/{last.get('stop')}"
    return None


async def _through_http(bases: list[str], runs: int) -> tuple[float, list[float], list[str], float]:
    latencies: list[float] = []
    cpu = time.process_time()
    # No reuse of idle connections: a server closes one idle past its keep-alive while a client may pick it.
    limits = httpx.Limits(max_connections=runs, max_keepalive_connections=0)
    headers = {"authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(headers=headers, timeout=600, limits=limits) as http:
        began = time.perf_counter()
        problems = await asyncio.gather(*(_one(http, bases[i % len(bases)], i, latencies) for i in range(runs)))
        took = time.perf_counter() - began
    return runs / took, latencies, [p for p in problems if p is not None], (time.process_time() - cpu) / took


async def _through_python(url: str, runs: int) -> float:
    store = open_store(url)
    served = agent()
    try:
        began = time.perf_counter()
        results = await asyncio.gather(
            *(served.arun(task_for([f"A-{i}"]), store=store, run_id=f"py.{i}") for i in range(runs))
        )
        took = time.perf_counter() - began
    finally:
        store.close()
    assert all(r.stop.value == "answered" for r in results)
    return runs / took


def _cpu(pid: int) -> float:
    """The CPU seconds process ``pid`` has used (Linux's /proc), user and system."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else (values or [0.0])[0]


def main() -> None:
    """Serve, load, measure, print; then the Python API on the same kind of store."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--workers", type=int, default=64, help="threads driving runs, per serving process")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a connection per run here and in each server
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.runs + 256)), hard))
    folder = Path(tempfile.mkdtemp(prefix="agent-fsm-serve-load-"))
    os.environ["AGENT_FSM_LEDGER"] = str(folder / "ledger.jsonl")
    server = None
    if args.backend == "postgres":
        bin_dir = find_bin()
        if bin_dir is None:
            raise SystemExit(INSTALL_HINT)
        server = PostgresServer(bin_dir).start()
    try:
        url = f"sqlite:///{folder / 'runs.db'}" if server is None else server.new_database()
        open_store(url).close()
        env = {
            "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'bench'}",
            "AGENT_FSM_CLIENTS": f"bench:{TOKEN}:start+read",
            "AGENT_FSM_LEDGER": str(folder / "ledger.jsonl"),
        }
        options = ("--workers", str(args.workers), "--recover-after", "600")
        with contextlib.ExitStack() as servers:
            started = [
                servers.enter_context(serve_process(url, env, *options, world="serve_load:agent"))
                for _ in range(args.processes)
            ]
            bases = [base for base, _ in started]
            idle = sum(_cpu(process.pid) for _, process in started)
            rate, latencies, problems, client_cpu = asyncio.run(_through_http(bases, args.runs))
            server_cpu = sum(_cpu(process.pid) for _, process in started) - idle
        python_url = f"sqlite:///{folder / 'python.db'}" if server is None else server.new_database()
        open_store(python_url).close()
        python_rate = asyncio.run(_through_python(python_url, args.runs))
    finally:
        if server is not None:
            server.stop()
    where = f"{args.backend}, {args.processes} process(es) x {args.workers} workers"
    print(f"{args.runs} runs at once, model {LATENCY * 1000:.0f} ms a reply ({where})")
    print(f"  HTTP + SSE : {rate:8.1f} runs/s")
    print(f"  (the load's own client used {client_cpu:.0%} of a core meanwhile)")
    print(f"  server CPU : {server_cpu / args.runs * 1000:8.2f} ms a run (all serving processes)")
    print(f"  Python API : {python_rate:8.1f} runs/s (agent.arun, one process, one loop)")
    print(f"  ratio      : {python_rate / rate:8.2f}x (Python API / HTTP)")
    p50, p99 = _percentile(latencies, 50), _percentile(latencies, 99)
    print(f"  reply -> SSE client: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms over {len(latencies)} replies")
    print(f"  every event once, in order, ending last: {'yes' if not problems else 'NO: ' + problems[0]}")


if __name__ == "__main__":
    main()
