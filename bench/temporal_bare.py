"""
A bare Temporal workflow for bench/temporal_scale.py: the same model and tool activities as agent_fsm's, no engine.

It asks the model activity, runs each proposed call through the tool
activity, appends the results, and stops at the first reply without calls:
no gate, no budgets, no validation, no checks. What agent_fsm's workflow costs
over it is the engine's own work on Temporal.

    python -c "import sys; sys.path[:0] = ['bench', '.']; import temporal_bare; temporal_bare.serve(ADDRESS, QUEUE)"
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_fsm.temporal.activities import MODEL_ACTIVITY, TOOL_ACTIVITY

_TIMEOUT = timedelta(seconds=60)


@workflow.defn(name="bench.Bare")
class BareWorkflow:
    """The minimal agent loop as a workflow: model, tools, model ... until an answer."""

    @workflow.run
    async def run(self, agent: str, task: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
        while True:
            reply = await workflow.execute_activity(
                MODEL_ACTIVITY, args=[agent, messages, []], start_to_close_timeout=_TIMEOUT
            )
            message = reply["message"]
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return str(message.get("content"))
            for call in calls:
                function = call["function"]
                data = {
                    "call_id": call["id"],
                    "name": function["name"],
                    "arguments": json.loads(function["arguments"]),
                    "raw": function["arguments"],
                }
                observed = await workflow.execute_activity(
                    TOOL_ACTIVITY, args=[agent, data, None], start_to_close_timeout=_TIMEOUT
                )
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(observed["content"])}
                )


async def _serve(address: str, queue: str) -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker

    from agent_fsm.temporal import activities, create_worker
    from agent_fsm.temporal.worker import sandbox_runner
    from tests.temporal_world import AGENTS

    client = await Client.connect(address)
    # Registers the agents the activities look up by name (this worker object is never run).
    create_worker(client, AGENTS.values(), task_queue=f"{queue}-unused", passthrough=["tests"])
    worker = Worker(  # the same sandbox as agent_fsm's workers, this module passed through as tests is
        client,
        task_queue=queue,
        workflows=[BareWorkflow],
        activities=[activities.model, activities.tool],
        workflow_runner=sandbox_runner(["tests"]),
    )
    async with worker:
        print("ready", flush=True)
        await asyncio.Event().wait()


def serve(address: str, queue: str) -> None:
    """Serve the bare workflow and agent_fsm's model and tool activities on ``queue`` until killed."""
    asyncio.run(_serve(address, queue))
