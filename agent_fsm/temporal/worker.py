"""
A worker: registers agents by their names and runs their workflows and activities.

    worker = create_worker(client, [desk])          # desk = Agent(model, tools, gate=gate, name="support-desk")
    await worker.run()

The workflow runs in Temporal's sandbox, with ``agent_fsm`` passed through
(it is deterministic given its inputs: the clock is read only for
``Limits(max_seconds=...)``, which a definition refuses).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agent_fsm import Agent
from agent_fsm.temporal.client import DEFAULT_TASK_QUEUE
from agent_fsm.temporal.definition import AgentDefinition, nested_definitions, register, served

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
    agents: Iterable[Agent | AgentDefinition],
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    passthrough: Iterable[str] = (),
    replace: bool = False,
    **options: Any,
) -> Worker:
    """
    A worker serving ``agents``, each by its name, on ``task_queue``; run it with ``await worker.run()``.

    An :class:`~agent_fsm.Agent` is served with the default settings; wrap
    it in an :class:`AgentDefinition` for others (timeouts, a gate doing
    I/O, a patched change). The agents they run as tools (nested agents,
    handoffs) are served too, under their own names (see
    :func:`~agent_fsm.temporal.definition.nested_definitions`). Every worker
    of a task queue must serve the same definitions under the same names. ``options`` go to
    :class:`temporalio.worker.Worker` (for example ``max_concurrent_activities``).

    Raises:
        TypeError: an agent (or an agent it nests) has no name (``Agent(..., name=...)``), or ``agents`` is a mapping.
        ValueError: two agents share a name, or another definition is registered under one in this process.
    """
    from temporalio.worker import Worker

    from agent_fsm.temporal import activities
    from agent_fsm.temporal.workflow import RunWorkflow

    if isinstance(agents, Mapping):
        raise TypeError("pass the agents as a list: each is served under its own name (Agent(..., name=...))")
    definitions = [served(agent) for agent in agents]
    names = [definition.name for definition in definitions]
    twice = [name for name in dict.fromkeys(names) if names.count(name) > 1]
    if twice:
        raise ValueError(f"two agents are named {twice[0]!r}; a worker serves one agent per name")
    for definition in [*definitions, *nested_definitions(definitions)]:  # a nested agent's calls are its own
        register(definition, replace=replace)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[RunWorkflow],
        activities=[activities.model, activities.tool, activities.gate],
        workflow_runner=sandbox_runner(passthrough),
        **options,
    )
