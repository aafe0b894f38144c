"""
Runs as durable Temporal workflows, across many workers (``pip install 'agent_fsm[temporal]'``).

    # worker process: the agent, served under its name
    desk = Agent(make_model(), tools, gate=gate, name="support-desk")
    worker = create_worker(client, [desk])
    await worker.run()

    # any client
    handle = await start_run(client, agent="support-desk", task="My order A-17 came broken.", run_id="ticket-1")
    await handle.approve(reviewer="ana")
    result = await handle.result()

The run machine runs inside the workflow, driven by the same async driver as
``arun``; model calls and tool calls are activities. Failure semantics,
approvals, long runs and changing an agent are in docs/temporal.md.
Importing this package does not import ``temporalio``; starting a worker or
a run does.
"""

from agent_fsm.temporal.client import (
    DEFAULT_TASK_QUEUE,
    AlreadyDecided,
    DecisionRefused,
    RunHandle,
    get_run,
    start_run,
)
from agent_fsm.temporal.definition import HISTORY_BOUND, AgentDefinition, Timeouts, definition_for, register, registered
from agent_fsm.temporal.worker import PASSTHROUGH, create_worker, sandbox_runner

__all__ = [
    # Defining agents
    "AgentDefinition",
    "Timeouts",
    "register",
    "registered",
    "definition_for",
    # Workers
    "create_worker",
    "sandbox_runner",
    "PASSTHROUGH",
    # Clients
    "start_run",
    "get_run",
    "RunHandle",
    "DEFAULT_TASK_QUEUE",
    "HISTORY_BOUND",
    # Errors
    "DecisionRefused",
    "AlreadyDecided",
]
