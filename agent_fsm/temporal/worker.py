"""
A worker: registers agent definitions by name and runs their workflows and activities.

    worker = create_worker(client, {"support-desk": desk_definition})
    await worker.run()

The workflow runs in Temporal's sandbox, with ``agent_fsm`` passed through
(it is deterministic given its inputs: the clock is read only for
``Limits(max_seconds=...)``, which a definition refuses).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agent_fsm.temporal.client import DEFAULT_TASK_QUEUE
from agent_fsm.temporal.definition import AgentDefinition, register

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

__all__ = ["PASSTHROUGH", "create_worker", "sandbox_runner"]

PASSTHROUGH = (
    "agent_fsm",
    "attr",
    "attrs",
    "cattrs",
    "transitions",
    "jsonschema",
    "jsonschema_specifications",
    "referencing",
    "rpds",
    "re2",
)
"""Modules the workflow sandbox takes from the worker's own imports instead of re-importing them per run."""


def sandbox_runner(passthrough: Iterable[str] = ()) -> SandboxedWorkflowRunner:
    """Temporal's sandbox with ``agent_fsm`` and ``passthrough`` (say, your agents' modules) passed through."""
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    modules = (*PASSTHROUGH, *passthrough)
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(*modules))


def create_worker(
    client: Client,
    agents: Mapping[str, AgentDefinition],
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    passthrough: Iterable[str] = (),
    replace: bool = False,
    **options: Any,
) -> Worker:
    """
    A worker serving ``agents`` by name on ``task_queue``; run it with ``await worker.run()`` (or ``async with``).

    Every worker of a task queue must register the same definitions under the
    same names. ``options`` go to :class:`temporalio.worker.Worker` (for
    example ``max_concurrent_activities``).

    Raises:
        ValueError: another definition is registered under one of the names in this process.
    """
    from temporalio.worker import Worker

    from agent_fsm.temporal.activities import Activities
    from agent_fsm.temporal.workflow import RunWorkflow

    for name, definition in agents.items():
        register(name, definition, replace=replace)
    activities = Activities()
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[RunWorkflow],
        activities=[activities.model, activities.tool, activities.gate],
        workflow_runner=sandbox_runner(passthrough),
        **options,
    )
