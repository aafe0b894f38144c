"""
What a worker registers under a name: the parts of an agent that cannot travel as data.

Tools, models and gates are code, so a Temporal client cannot send them; it
names an :class:`AgentDefinition` that every worker of the task queue has
registered under that name. This module imports nothing from Temporal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from agent_fsm.engine import AnswerCheck, EndingRule, Gate, Limits, Model, ToolSpec, check_registry

__all__ = ["HISTORY_BOUND", "AgentDefinition", "Timeouts", "definition_for", "register", "registered"]


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


def _limits(instance: Any, attribute: Any, value: Limits) -> None:
    if not isinstance(value, Limits):
        raise TypeError(f"'limits' must be a Limits (got {value!r} that is a {type(value).__name__}).")
    if getattr(value, "max_seconds", None) is not None:
        raise ValueError(
            "Limits(max_seconds=...) reads the clock, which a workflow may not do on replay;"
            " bound a run's time with the workflow's execution timeout (start_run(..., execution_timeout=...))"
        )


def _tools(instance: Any, attribute: Any, value: Mapping[str, ToolSpec]) -> None:
    check_registry(value)


@attrs.frozen
class AgentDefinition:
    """
    One agent as a worker runs it: tools, a model factory, a gate, limits, a system prompt.

    ``model`` is a factory called once per worker process (an HTTP client
    per worker, not per call). ``gate`` and ``answer_check`` run inside the
    workflow and must be pure (no I/O, no clock, no randomness): the workflow
    replays them. A gate that must do I/O (ask a policy service) sets
    ``gate_does_io=True`` and runs as an activity instead.

    To change a definition while runs are in flight, give the new one a
    ``patch`` id and the definition it replaces as ``before``: a run that
    began under the old one keeps it to the end (Temporal's
    ``workflow.patched``), every run begun later takes the new one
    (docs/temporal.md, "Changing an agent").
    """

    tools: Mapping[str, ToolSpec] = attrs.field(validator=_tools)
    model: Callable[[], Model]
    gate: Gate | None = None
    limits: Limits = attrs.field(factory=Limits, validator=_limits)
    system_prompt: str | None = None
    answer_check: AnswerCheck | None = None
    endings: EndingRule | None = None
    gate_does_io: bool = False
    timeouts: Timeouts = attrs.field(factory=Timeouts)
    patch: str | None = None
    before: AgentDefinition | None = None

    def __attrs_post_init__(self) -> None:
        if not callable(self.model):
            raise TypeError(f"'model' must be a factory returning a model (got {self.model!r})")
        if (self.patch is None) != (self.before is None):
            raise ValueError("a changed definition names its 'patch' id and the definition it replaces ('before')")
        seen = set()
        definition: AgentDefinition | None = self
        while definition is not None and definition.patch is not None:
            if definition.patch in seen:
                raise ValueError(f"patch id {definition.patch!r} is used twice in one definition's history")
            seen.add(definition.patch)
            definition = definition.before

    def chosen(self, patched: Callable[[str], bool]) -> AgentDefinition:
        """The definition a run uses: the newest whose patch ``patched`` admits (the oldest has none)."""
        definition = self
        while definition.patch is not None and definition.before is not None and not patched(definition.patch):
            definition = definition.before
        return definition


# The definitions this process serves, by name. A worker registers them; the workflow and the activities,
# which Temporal creates by name, look them up here.
_REGISTRY: dict[str, AgentDefinition] = {}


def register(name: str, definition: AgentDefinition, *, replace: bool = False) -> None:
    """
    Serve ``definition`` under ``name`` in this process (what :func:`create_worker` does for its agents).

    Raises:
        ValueError: another definition is registered under ``name`` (pass ``replace=True`` to swap it).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"an agent's name must be a non-empty str (got {name!r})")
    if not isinstance(definition, AgentDefinition):
        raise TypeError(f"register an AgentDefinition (got {type(definition).__name__})")
    current = _REGISTRY.get(name)
    if current is not None and current is not definition and not replace:
        raise ValueError(f"another definition is registered as {name!r}; name it differently or pass replace=True")
    _REGISTRY[name] = definition


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
