"""
A worker process for the Temporal tests and bench: serves tests.temporal_world's agents until it is killed.

    python -m tests.temporal_worker ADDRESS TASK_QUEUE

It prints ``ready`` once it polls, so a test knows when to start runs.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta


async def main(address: str, task_queue: str) -> None:
    from temporalio.client import Client

    from agent_fsm.temporal import create_worker
    from tests.temporal_world import AGENTS

    client = await Client.connect(address)
    # A killed worker's cached runs move to another worker after 1 s instead of the default 10.
    sticky = timedelta(seconds=1)
    worker = create_worker(
        client, AGENTS, task_queue=task_queue, passthrough=["tests"], sticky_queue_schedule_to_start_timeout=sticky
    )
    async with worker:
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
