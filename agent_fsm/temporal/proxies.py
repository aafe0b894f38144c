"""
The agent as the workflow sees it: a model, tools and a gate whose work is done by activities.

Inside the workflow the driver runs the agent unchanged; only what it calls
is replaced. The model is an adapter whose ``achat`` runs the model activity;
each tool keeps its contract (validated in the workflow, pure) and gets a
handler that runs the tool activity; a gate that does I/O becomes one that
runs the gate activity. The retry rule of docs/durability.md is the
activities' retry policy: an effectful tool that is not idempotent gets
exactly one attempt, and an attempt whose outcome is unknown (timed out, its
worker lost) stops the driver with :class:`OutcomeUnknown`, so that the
workflow settles the call as recovery does: a person decides.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as ActivityTimeout

from agent_fsm import Agent
from agent_fsm.engine import (
    Gate,
    Intent,
    Nested,
    PersonAnswers,
    ProviderFailure,
    RunState,
    ToolCall,
    ToolContext,
    ToolError,
    ToolSpec,
    Verdict,
)
from agent_fsm.temporal.activities import GATE_ACTIVITY, MODEL_ACTIVITY, TOOL_ACTIVITY
from agent_fsm.temporal.codec import call_data, fault_of, observation_of, reply_of, verdict_of
from agent_fsm.temporal.definition import AgentDefinition, Timeouts, definition_for

__all__ = [
    "IntentLog",
    "OutcomeUnknown",
    "RemoteHandlerError",
    "Rollover",
    "WorkflowModel",
    "gate_of",
    "tools_of",
    "workflow_agent",
]


class OutcomeUnknown(Exception):
    """An effectful call's only attempt ended without a result: it may or may not have taken effect."""


class RemoteHandlerError(Exception):
    """A tool's handler raised an unexpected exception on the worker (a bug; the run stops with its state)."""


class Rollover(Exception):
    """The history passed its bound before a model call: the workflow continues as new from a clean state."""


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


class IntentLog:
    """
    The workflow's checkpointer: the state at the intent of the effectful call in flight, and the live state.

    Temporal's history is the durable record; this keeps what settling an
    interrupted call needs (the state as it was when the intent was made),
    exactly what a store's checkpoint holds.
    """

    def __init__(self) -> None:
        self.intent: Intent | None = None
        self.at_intent: RunState | None = None
        self.live: RunState | None = None

    def begin(self, run_id: str, state: RunState) -> None:
        """A run begins: remember its state."""
        self.live = state

    def save(self, run_id: str, state: RunState, intent: Intent | None = None) -> None:
        """Remember ``state``; at an intent, a copy of it as it stands before the handler runs."""
        self.live = state
        self.intent = intent
        self.at_intent = copy.deepcopy(state) if intent is not None else None


class WorkflowModel:
    """The model as the workflow calls it: every ``achat`` is one model activity."""

    def __init__(self, agent: str, timeouts: Timeouts, rollover: Any = None) -> None:
        self.agent = agent
        self.timeouts = timeouts
        # Asked before each call whether the history has grown past its bound (see RunWorkflow).
        self.rollover = rollover
        # Model calls made in this workflow run: one that has made none does not continue as new again.
        self.calls = 0

    async def achat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        """Run the model activity on the transcript; a provider's failure is raised as it was raised there."""
        if self.calls and self.rollover is not None and self.rollover():
            raise Rollover("the workflow's history passed its bound; continuing as new")
        timeouts = self.timeouts
        try:
            data = await workflow.execute_activity(
                MODEL_ACTIVITY,
                args=[self.agent, list(messages), list(tools)],
                start_to_close_timeout=_seconds(timeouts.model),
                heartbeat_timeout=_seconds(timeouts.heartbeat),
                retry_policy=RetryPolicy(
                    maximum_attempts=timeouts.model_attempts, initial_interval=_seconds(timeouts.retry_interval)
                ),
            )
        except ActivityError as exc:
            timed_out = isinstance(exc.cause, ActivityTimeout)
            raise ProviderFailure(
                f"the model activity failed after {timeouts.model_attempts} attempt(s): {exc.cause or exc}",
                kind="timeout" if timed_out else "transport",
            ) from exc
        self.calls += 1
        if "fault" in data:
            raise fault_of(data["fault"])
        return reply_of(data)

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        """Not available: a workflow runs the async driver, which calls :meth:`achat`."""
        raise TypeError("a workflow's model is asynchronous: drive it with aadvance/aresume")


def _retry(spec: ToolSpec, timeouts: Timeouts) -> RetryPolicy:
    if spec.effectful and not spec.idempotent:
        return RetryPolicy(maximum_attempts=1)  # at-least-once would mean twice: one attempt, then a person
    return RetryPolicy(maximum_attempts=timeouts.tool_attempts, initial_interval=_seconds(timeouts.retry_interval))


def _proxy(agent: str, name: str, spec: ToolSpec, timeouts: Timeouts) -> ToolSpec:
    policy = _retry(spec, timeouts)

    async def handler(*, context: ToolContext, **arguments: Any) -> Any:
        call = call_data(ToolCall(context.call_id, name, arguments))
        try:
            data = await workflow.execute_activity(
                TOOL_ACTIVITY,
                args=[agent, call, attrs.asdict(context)],
                start_to_close_timeout=_seconds(timeouts.tool),
                heartbeat_timeout=_seconds(timeouts.heartbeat),
                retry_policy=policy,
            )
        except ActivityError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type == "HandlerError":
                raise RemoteHandlerError(cause.message) from exc
            if spec.effectful:
                raise OutcomeUnknown(f"{name} ({context.call_id}): {cause or exc}") from exc
            # An effect-free call that could not be run is an error the model reads, as a timeout in-process.
            raise TimeoutError(f"{name} could not be run: {cause or exc}") from exc
        observation = observation_of(data)
        if observation.ok:
            return observation.content
        content = observation.content
        if isinstance(content, str):
            raise ToolError(content, permanent=observation.permanent)
        raise ToolError("the tool failed", data=content, permanent=observation.permanent)

    # The proxy is a coroutine the workflow awaits; whether the real handler blocks is the activity's concern
    # (it runs blocking handlers in a thread), so a ``blocking`` spec must not send the proxy to a thread.
    return attrs.evolve(spec, handler=handler, blocking=False)


def tools_of(
    agent: str, definition: AgentDefinition, nested: Callable[[str], Agent] | None = None
) -> dict[str, ToolSpec]:
    """
    The agent's tools with their contracts, each handler replaced by its activity (a tool a person answers
    has no handler to replace: it is kept as declared).

    A tool that runs another agent (:class:`~agent_fsm.engine.Nested`) is
    not an activity: the nested run is steps of this one, so it runs here,
    in the workflow, as the agent ``nested`` returns for its name (its own
    model, handlers and gate made activities in turn).
    """
    tools = {}
    for name, spec in definition.agent.tools.items():
        handler = spec.handler
        if isinstance(handler, Nested) and nested is not None:
            inner = Nested(handler.agent, hands_over=handler.hands_over, task=handler.task, passes=handler.passes)
            inner.agent = nested(handler.agent.name or "")
            tools[name] = attrs.evolve(spec, handler=inner)
        elif isinstance(handler, PersonAnswers):  # a person answers it: no activity, the run pauses on each call
            tools[name] = spec
        else:
            tools[name] = _proxy(agent, name, spec, definition.timeouts)
    return tools


def workflow_agent(
    name: str, definition: AgentDefinition, model: WorkflowModel, chosen: Callable[[AgentDefinition], AgentDefinition]
) -> Agent:
    """
    The agent ``name`` as the workflow runs it, and every agent it nests, each by the definition served by its name.

    Each agent's model, handlers and I/O gate are activities under its own
    name (so a nested run's requests reach the nested agent's model and
    handlers); ``chosen`` picks the definition a run admits among a changed
    one's versions. An agent nesting itself (directly or not) is built once.
    """
    built: dict[str, Agent] = {}

    def build(agent_name: str, served: AgentDefinition, asked: WorkflowModel) -> Agent:
        built[agent_name] = served.agent  # an agent nesting itself finds itself while its tools are built
        agent = served.agent.replace(model=asked, tools=tools_of(agent_name, served, nested))
        built[agent_name] = agent = agent.replace(gate=gate_of(agent_name, served))
        return agent

    def nested(agent_name: str) -> Agent:
        if agent_name in built:
            return built[agent_name]
        served = chosen(definition_for(agent_name))
        # A nested run does not continue as new mid-run: the workflow rolls over at its own model calls and pauses.
        return build(agent_name, served, WorkflowModel(agent_name, served.timeouts))

    top = build(name, definition, model)
    for agent in built.values():  # a tool built while its agent was still being built runs the finished agent
        for spec in agent.tools.values():
            if isinstance(spec.handler, Nested):
                spec.handler.agent = built[spec.handler.agent.name or ""]
    return top


def gate_of(agent: str, definition: AgentDefinition) -> Gate | None:
    """The gate the workflow consults: the agent's own when pure, else one that runs the gate activity."""
    if not definition.gate_does_io or definition.agent.gate is None:
        return definition.agent.gate
    timeouts = definition.timeouts

    async def gate(call: ToolCall) -> Verdict:
        data = await workflow.execute_activity(
            GATE_ACTIVITY,
            args=[agent, call_data(call)],
            start_to_close_timeout=_seconds(timeouts.gate),
            retry_policy=RetryPolicy(maximum_attempts=timeouts.tool_attempts),
        )
        return verdict_of(data)

    return gate  # type: ignore[return-value]  # the async driver awaits an async gate
