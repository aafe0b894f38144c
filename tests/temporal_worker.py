"""
A worker process for the Temporal tests and bench: serves tests.temporal_world's agents until it is killed.

    python -m tests.temporal_worker ADDRESS TASK_QUEUE [STICKY_SECONDS]

``STICKY_SECONDS`` is how long a task waits for this worker, which caches
the run, before any worker may take it (the crash tests use 1 s, so a
killed worker's runs move on quickly; Temporal's default is 10 s, which a
busy worker needs: a task moved elsewhere costs a replay of the run's history).

It prints ``ready`` once it polls, so a test knows when to start runs.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta


async def main(address: str, task_queue: str, sticky_seconds: float | None) -> None:
    from temporalio.client import Client

    from agent_fsm.temporal import create_worker
    from tests.temporal_world import AGENTS

    client = await Client.connect(address)
    options = (
        {} if sticky_seconds is None else {"sticky_queue_schedule_to_start_timeout": timedelta(seconds=sticky_seconds)}
    )
    worker = create_worker(client, AGENTS.values(), task_queue=task_queue, passthrough=["tests"], **options)
    async with worker:
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else None))
