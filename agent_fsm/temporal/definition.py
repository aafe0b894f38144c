"""
What a worker registers: an :class:`~agent_fsm.Agent`, by its name, with the settings only Temporal needs.

An agent's model, tools and gate are code, so a Temporal client cannot send
them; it names an agent that every worker of the task queue has registered
under that name. The :class:`AgentDefinition` beside the agent holds what
Temporal alone needs: activity timeouts, whether the gate does I/O, and the
definition a changed one replaces. This module imports nothing from Temporal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from agent_fsm import Agent
from agent_fsm.engine import Nested

__all__ = [
    "HISTORY_BOUND",
    "AgentDefinition",
    "Timeouts",
    "definition_for",
    "nested_definitions",
    "register",
    "registered",
    "served",
]


HISTORY_BOUND = 2000
"""
Events in one workflow run's history after which the run continues as new.

A turn costs about 6 events for the model call and 6 per tool call, so
this is some 150 turns; Temporal's own suggestion (well before its 50,000
event limit) also triggers it. ``start_run(history_bound=...)`` sets another.
"""


def _positive(instance: Any, attribute: Any, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"'{attribute.name}' must be a number of seconds > 0 (got {value!r}).")


def _attempts(instance: Any, attribute: Any, value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"'{attribute.name}' must be a whole number >= 1 (got {value!r}).")


@attrs.frozen
class Timeouts:
    """
    How long each activity may take, how soon a lost worker is noticed, and how often each is tried.

    ``heartbeat`` bounds how long a tool or model activity may go without a
    sign of life: a worker killed mid-call is noticed after that long, not
    after the whole ``tool`` or ``model`` timeout. ``model_attempts`` and
    ``tool_attempts`` are Temporal's attempts at one model call and at one
    call of an effect-free or idempotent tool (an effectful tool that is not
    idempotent always gets exactly one).
    """

    model: float = attrs.field(default=120.0, validator=_positive)
    tool: float = attrs.field(default=300.0, validator=_positive)
    gate: float = attrs.field(default=30.0, validator=_positive)
    heartbeat: float = attrs.field(default=30.0, validator=_positive)
    model_attempts: int = attrs.field(default=3, validator=_attempts)
    tool_attempts: int = attrs.field(default=5, validator=_attempts)
    retry_interval: float = attrs.field(default=1.0, validator=_positive)


def _agent(instance: Any, attribute: Any, value: Agent) -> None:
    if not isinstance(value, Agent):
        raise TypeError(f"an AgentDefinition holds an Agent (got {value!r} that is a {type(value).__name__}).")
    asking = sorted(name for name, spec in value.tools.items() if getattr(spec.handler, "asks_mid_call", False))
    if asking:
        raise ValueError(
            f"tools {asking} may ask a person in the middle of a call (an MCP server opened with elicitation=True):"
            " a call runs in one activity, which cannot stay open while the run waits for the person; open the"
            " worker's servers without elicitation"
        )
    if getattr(value.limits, "max_seconds", None) is not None:
        raise ValueError(
            "Limits(max_seconds=...) reads the clock, which a workflow may not do on replay;"
            " bound a run's time with the workflow's execution timeout (start_run(..., execution_timeout=...))"
        )


@attrs.frozen
class AgentDefinition:
    """
    An agent as a worker serves it: the :class:`~agent_fsm.Agent`, and what only Temporal needs beside it.

    The agent's model and handlers run in activities, on whichever worker
    takes them; its gate, answer check, estimator and endings run inside the
    workflow and must be pure (no I/O, no clock, no randomness): the workflow
    replays them. A gate that must do I/O (ask a policy service) sets
    ``gate_does_io=True`` and runs as an activity instead. ``timeouts``
    bound the activities.

    To change an agent while runs are in flight, give the new definition a
    ``patch`` id and the definition it replaces as ``before``: a run that
    began under the old one keeps it to the end (Temporal's
    ``workflow.patched``), every run begun later takes the new one
    (docs/temporal.md, "Changing an agent").
    """

    agent: Agent = attrs.field(validator=_agent)
    gate_does_io: bool = attrs.field(default=False, kw_only=True)
    timeouts: Timeouts = attrs.field(factory=Timeouts, kw_only=True)
    patch: str | None = attrs.field(default=None, kw_only=True)
    before: AgentDefinition | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if (self.patch is None) != (self.before is None):
            raise ValueError("a changed definition names its 'patch' id and the definition it replaces ('before')")
        seen = set()
        definition: AgentDefinition | None = self
        while definition is not None and definition.patch is not None:
            if definition.patch in seen:
                raise ValueError(f"patch id {definition.patch!r} is used twice in one definition's history")
            seen.add(definition.patch)
            definition = definition.before
            if definition is not None and definition.agent.name != self.agent.name:
                raise ValueError(
                    f"a changed agent keeps its name: {self.agent.name!r} replaces {definition.agent.name!r}"
                )

    @property
    def name(self) -> str | None:
        """The name the definition is served under: its agent's."""
        return self.agent.name

    @property
    def patches(self) -> list[str]:
        """The patch ids of this definition and those it replaces, newest first: what a run under it admits."""
        found, definition = [], self
        while definition.patch is not None and definition.before is not None:
            found.append(definition.patch)
            definition = definition.before
        return found

    def chosen(self, patched: Callable[[str], bool]) -> AgentDefinition:
        """The definition a run uses: the newest whose patch ``patched`` admits (the oldest has none)."""
        definition = self
        while definition.patch is not None and definition.before is not None and not patched(definition.patch):
            definition = definition.before
        return definition


def served(agent: Agent | AgentDefinition) -> AgentDefinition:
    """
    ``agent`` as a worker serves it: an Agent with the default settings, a definition as it is.

    Raises:
        TypeError: ``agent`` is neither an Agent nor an AgentDefinition, or its agent has no name.
    """
    definition = AgentDefinition(agent) if isinstance(agent, Agent) else agent
    if not isinstance(definition, AgentDefinition):
        raise TypeError(f"serve an Agent or an AgentDefinition (got {type(agent).__name__})")
    if definition.name is None:
        raise TypeError("a worker serves an agent by its name: give it one (Agent(..., name='support-desk'))")
    return definition


def nested_definitions(definitions: list[AgentDefinition]) -> list[AgentDefinition]:
    """
    The agents ``definitions`` run as tools (:meth:`~agent_fsm.Agent.as_tool`, handoffs), at any depth, to serve too.

    A nested run's model and handlers are the nested agent's, so the
    activities look it up by its name like any served agent. One given in
    ``definitions`` is served as given (its timeouts, an I/O gate) and must
    be the very agent nested; any other is served with the timeouts of the
    first definition given that nests it (directly or not).

    Raises:
        TypeError: a nested agent has no name.
        ValueError: two different agents nested (or served) under one name.
    """
    given = {definition.name: definition for definition in definitions}
    found: dict[str, AgentDefinition] = {}
    todo = [(definition, d) for d in definitions for definition in _history(d)]
    while todo:
        definition, nesting = todo.pop(0)  # in the order given: the first that nests an agent sets its timeouts
        for tool, spec in definition.agent.tools.items():
            handler = spec.handler
            if not isinstance(handler, Nested):
                continue
            inner = handler.agent
            if inner.name is None:
                raise TypeError(
                    f"agent {definition.name!r} runs an unnamed agent as its tool {tool!r}: a worker serves agents by"
                    " name, so give it one (Agent(..., name='refunds'))"
                )
            known = given.get(inner.name) or found.get(inner.name)
            if known is not None:
                if all(d.agent != inner for d in _history(known)):
                    raise ValueError(
                        f"agent {definition.name!r} nests an agent named {inner.name!r} that is not the one served"
                        " under that name; a worker serves one agent per name"
                    )
                continue
            found[inner.name] = AgentDefinition(inner, timeouts=nesting.timeouts)
            todo.append((found[inner.name], nesting))
    return list(found.values())


def _history(definition: AgentDefinition) -> list[AgentDefinition]:
    """A definition and those it replaces (a run begun under an older one still nests that one's agents)."""
    chain: list[AgentDefinition] = []
    current: AgentDefinition | None = definition
    while current is not None:
        chain.append(current)
        current = current.before
    return chain


# The definitions this process serves, by name. A worker registers them; the workflow and the activities,
# which Temporal creates by name, look them up here.
_REGISTRY: dict[str, AgentDefinition] = {}


def register(agent: Agent | AgentDefinition, *, replace: bool = False) -> AgentDefinition:
    """
    Serve ``agent`` in this process under its name (what :func:`create_worker` does for each of its agents).

    An :class:`~agent_fsm.Agent` is served with the default settings
    (``AgentDefinition(agent)``); returns the definition registered.

    Raises:
        TypeError: ``agent`` is neither an Agent nor an AgentDefinition, or has no name.
        ValueError: another definition is registered under that name (pass ``replace=True`` to swap it).
    """
    definition = served(agent)
    name = definition.name
    assert name is not None
    current = _REGISTRY.get(name)
    if current is not None and current != definition and not replace:
        raise ValueError(f"another definition is registered as {name!r}; name it differently or pass replace=True")
    _REGISTRY[name] = definition
    return definition


def registered() -> dict[str, AgentDefinition]:
    """The definitions this process serves, by name (a copy)."""
    return dict(_REGISTRY)


def definition_for(name: str) -> AgentDefinition:
    """
    The definition registered under ``name``.

    Raises:
        LookupError: no worker in this process registered ``name``.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise LookupError(f"no agent is registered as {name!r} in this worker (registered: {known})") from None
