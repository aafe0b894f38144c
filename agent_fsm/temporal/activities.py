"""
The activities: where a workflow's model calls, tool calls and I/O gates really happen.

They run on any worker that registered the agent by name, outside the
workflow sandbox, and are the only place the agent's model and handlers
are called. A model's or handler's expected failure comes back as
data (a provider fault, an ``error`` observation) so that Temporal retries
only what the infrastructure lost: a timed-out attempt, a dead worker.
A handler's bug is a non-retryable failure carrying the call.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_fsm.engine import HandlerError, ToolContext, adrive, as_verdict, execute, executing, execution
from agent_fsm.temporal.codec import call_of, fault_data, observation_data, reply_data, verdict_data
from agent_fsm.temporal.definition import definition_for

__all__ = ["GATE_ACTIVITY", "MODEL_ACTIVITY", "TOOL_ACTIVITY", "gate", "model", "tool"]

MODEL_ACTIVITY = "agent_fsm.model"
"""The activity type of a model call."""
TOOL_ACTIVITY = "agent_fsm.tool"
"""The activity type of a tool call."""
GATE_ACTIVITY = "agent_fsm.gate"
"""The activity type of a gate that does I/O."""

T = TypeVar("T")


async def _beating(work: Awaitable[T]) -> T:
    """Await ``work`` while telling Temporal this worker is alive, so a dead one is noticed within a heartbeat."""
    task = asyncio.ensure_future(work)
    timeout = activity.info().heartbeat_timeout
    beat = timeout.total_seconds() / 3 if timeout else None
    while True:
        done, _ = await asyncio.wait({task}, timeout=beat)
        if done:
            return task.result()
        activity.heartbeat()


def _in_thread(call: Callable[[], T]) -> Awaitable[T]:
    # A handler or model that blocks must not stall the worker's event loop (and with it every heartbeat).
    return asyncio.to_thread(call)


# The activities are plain functions: each looks its agent up by name in this process's registry.


@activity.defn(name=MODEL_ACTIVITY)
async def model(agent: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Ask the agent's model once: the reply as data, or the provider's failure as data."""
    asked = definition_for(agent).agent.model
    try:
        achat = getattr(asked, "achat", None)
        if achat is not None:
            reply = await _beating(achat(messages, tools))
        elif getattr(asked, "blocking", False):
            reply = await _beating(_in_thread(lambda: asked.chat(messages, tools)))
        else:
            reply = asked.chat(messages, tools)  # a model that does not block is called inline, as arun does
    except OSError as exc:  # the provider's own retries are spent: the run ends provider_error
        return {"fault": fault_data(exc)}
    return reply_data(reply)


@activity.defn(name=TOOL_ACTIVITY)
async def tool(agent: str, call: dict[str, Any], context: dict[str, Any] | None) -> dict[str, Any]:
    """
    Run one validated, allowed call's real handler and return its observation as data.

    ``context`` is the workflow's :class:`ToolContext` for the call: the
    idempotency key is the same on every attempt of this call.
    """
    tools = definition_for(agent).agent.tools
    parsed = call_of(call)
    given = ToolContext(**context) if context is not None else None

    def run() -> Any:
        with executing(parsed.call_id):
            return execute(parsed, tools, context=given)

    try:
        if inspect.iscoroutinefunction(tools[parsed.name].handler):
            with executing(parsed.call_id):
                observation = await _beating(adrive(execution(parsed, tools, context=given)))
        else:  # a plain handler runs in a thread, so the worker keeps heart-beating however long it takes
            observation = await _beating(_in_thread(run))
    except HandlerError as exc:
        raise ApplicationError(str(exc), call, type="HandlerError", non_retryable=True) from exc
    return observation_data(observation)


@activity.defn(name=GATE_ACTIVITY)
async def gate(agent: str, call: dict[str, Any]) -> dict[str, Any]:
    """Consult the agent's gate (one that does I/O) about a validated call."""
    judge = definition_for(agent).agent.gate
    assert judge is not None, "only an agent with a gate runs it as an activity"
    decision: Any = await _in_thread(lambda: judge(call_of(call)))
    if inspect.isawaitable(decision):
        decision = await decision
    return verdict_data(as_verdict(decision))
