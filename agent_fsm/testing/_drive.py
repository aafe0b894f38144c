"""
Driving one run for a property: a fresh world, a gate, a model, a human's decisions at each pause.

The one-call checks (``agent_fsm.testing._checks``), the shortest-path
search and users' own properties are built on :func:`drive`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from agent_fsm.engine import (
    Agent,
    Gate,
    Limits,
    Model,
    Registry,
    RunResult,
    Stop,
    ToolCall,
    answered_by,
    content_text,
    deny_effects,
    has_parts,
)
from agent_fsm.testing._coverage import Coverage
from agent_fsm.testing._enumeration import plain_answer
from agent_fsm.testing._watchdog import Runaway, _Watched, runaway_violation, watchdog_calls

__all__ = [
    "CANCEL",
    "DEFAULT_TASK",
    "Driver",
    "GateFactory",
    "Outcome",
    "GateContext",
    "ManualClock",
    "World",
    "describe_run",
    "drive",
    "world_of",
]

DEFAULT_TASK = "Help the customer with their request."
"""The user message of runs the kit drives when a check is given no task of its own."""

CANCEL = "cancel"
"""A person's decision at a pause besides approve (``True``) and reject (``False``): cancel the run there."""

Driver = Callable[..., RunResult]
"""Anything called like :func:`agent_fsm.run`: ``driver(task, model, tools, *, gate=, limits=)``."""


class ManualClock:
    """
    A clock for ``Agent(clock=...)`` that moves only when told to, and by ``step`` seconds at each reading.

    A time budget tested on it ends the same way on any machine, loaded or
    not, and without sleeping: a slow model or tool calls :meth:`advance`
    instead of :func:`time.sleep`. ``step`` (default a microsecond) stands for
    the little time every step of a run takes, so a tiny budget still ends.
    """

    def __init__(self, start: float = 0.0, step: float = 1e-6) -> None:
        if not step >= 0:
            raise ValueError(f"step must be a number of seconds >= 0 (got {step!r})")
        self.now, self.step = float(start), float(step)

    def __repr__(self) -> str:
        return f"ManualClock({self.now!r}, step={self.step!r})"

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass (a slow call's duration)."""
        if not seconds >= 0:
            raise ValueError(f"a clock goes forward only (got {seconds!r} seconds)")
        self.now += seconds


@attrs.define
class World:
    """
    A registry and the effect log its handlers write (the ground truth of what happened).

    ``agent``, when the world is an :class:`agent_fsm.Agent`'s, is what the
    kit runs: its answer check, endings, system prompt and estimator hold,
    with the model, gate and limits a check draws or is given in their place.
    """

    tools: Registry
    effects: list[Any] = attrs.field(factory=list)
    agent: Agent | None = None


def world_of(made: Any) -> World:
    """
    Read what a tools factory made: a registry alone, an :class:`agent_fsm.Agent`
    (or anything with an ``.agent`` that is one, and its ``.effects``), or anything
    with ``.tools`` and ``.effects`` (a support desk, an :class:`agent_fsm.scenarios.environment.Environment`).

    Raises:
        TypeError: it is none of these.
    """
    if isinstance(made, World):
        return made
    if isinstance(made, Agent):
        return World(made.tools, [], made)
    agent = getattr(made, "agent", None)
    if isinstance(agent, Agent):
        return World(agent.tools, getattr(made, "effects", []), agent)
    if isinstance(made, Mapping):
        return World(dict(made))
    if hasattr(made, "tools"):
        return World(made.tools, getattr(made, "effects", []))
    raise TypeError(f"a tools factory must return a registry or an object with .tools (and .effects); got {made!r}")


@attrs.define
class GateContext:
    """
    What a gate factory may read besides the call: the registry, the effect
    log, and the transcript as of the latest model call (live while the run goes).

    A sound gate needs only the call; the transcript is here so that a gate
    trusting the model's prose can be written, and caught.
    """

    tools: Registry
    effects: list[Any]
    messages: list[dict[str, Any]] = attrs.field(factory=list)


GateFactory = Callable[[GateContext], Gate]


@attrs.frozen
class Outcome:
    """A driven run: its result, its world, and the ids of the calls a human approved."""

    result: RunResult
    world: World
    gate: Gate
    approved: tuple[str, ...] = ()
    agent: Agent | None = None  # the agent the engine ran it with (None: the caller's own driver ran it)


def _gate_of(
    gate: Gate | None, gate_factory: GateFactory | None, context: GateContext, agent: Agent | None = None
) -> Gate:
    if gate is None and gate_factory is None and agent is not None:
        return agent.gate if agent.gate is not None else deny_effects(agent.tools)  # the agent's own, as it runs
    if (gate is None) == (gate_factory is None):
        raise TypeError("give exactly one of gate= (a gate) or gate_factory= (GateContext -> gate)")
    return gate if gate is not None else gate_factory(context)  # type: ignore[misc]


def drive(
    model: Model,
    world: World,
    *,
    gate: Gate | None = None,
    gate_factory: GateFactory | None = None,
    limits: Limits = Limits(),
    decide: Callable[[ToolCall], bool | str] = lambda call: False,
    driver: Driver | None = None,
    task: str = DEFAULT_TASK,
    coverage: Coverage | None = None,
) -> Outcome:
    """
    Run ``task`` in ``world`` to an absorbing stop, asking ``decide`` at every pause.

    With ``driver=None`` the engine runs it (the world's agent, or an
    :class:`agent_fsm.Agent` of its tools, with ``model``, the gate and
    ``limits`` in place; then ``resume`` with ``decide(blocked_call)`` until
    the run no longer pauses; :data:`CANCEL` cancels it). Another ``driver`` is called once and its
    result kept as it is.
    ``coverage`` records the run (its path, proposals and the gate's verdicts).
    """
    context = GateContext(world.tools, world.effects)
    chosen = _gate_of(gate, gate_factory, context, world.agent)
    outcome = _driven(model, world, chosen, context, limits, decide, driver, task, coverage)
    if coverage is not None:
        coverage.record_run(outcome.result, world.tools, outcome.agent)
    return outcome


def _driven(
    model: Model,
    world: World,
    chosen: Gate,
    context: GateContext,
    limits: Limits,
    decide: Callable[[ToolCall], bool | str],
    driver: Driver | None,
    task: str,
    coverage: Coverage | None,
) -> Outcome:
    judging = chosen if coverage is None else coverage.counting(chosen)
    # The watchdog: a driver past its turn budget is already broken, and the
    # turn_budget invariant names it precisely once the run ends; one that
    # asks four times over (with a margin a short script fits in) may never
    # end, and is stopped here instead of hanging the test.
    watched = _Watched(model, context, max_calls=watchdog_calls(limits))
    try:
        if driver is not None:
            return Outcome(driver(task, watched, world.tools, gate=judging, limits=limits), world, chosen)
        base = world.agent if world.agent is not None else Agent(watched, world.tools, gate=judging)
        agent = base.replace(model=watched, gate=judging, limits=limits)
        result = agent.run(task)
        approved: list[str] = []
        while result.stop is Stop.AWAITING_APPROVAL:
            assert result.blocked_on is not None
            approve = decide(result.blocked_on)
            if approve is True:
                approved.append(result.blocked_on.call_id)
            result = decide_pause(agent, result, approve)
    except Runaway as runaway:
        raise runaway_violation(runaway, limits) from None
    return Outcome(result, world, chosen, tuple(approved), agent)


def decide_pause(agent: Agent, result: RunResult, approve: bool | str) -> RunResult:
    """
    Approve, reject or (:data:`CANCEL`) cancel the pause ``result`` rests in; a call a person answers is
    answered, when approved.

    The answer is the simplest value its result schema accepts: the kit's person says yes by answering.
    """
    if approve == CANCEL:
        return agent.cancel(result.state, by="kit", reason="a random cancel")
    if approve is True:
        _call, person = answered_by(agent.tools, result.state)
        if person is not None:
            return agent.resume(result.state, answer=plain_answer(person.result))
    return agent.resume(result.state, approve=bool(approve))


def describe_run(result: RunResult) -> str:
    """The run message by message, one line each: what a failing example's reader needs."""
    stop = result.stop.value if isinstance(result.stop, Stop) else result.stop
    code = getattr(result, "code", stop)
    declared = f" code={code!r}" if code != stop else ""  # a world's own ending, when it named one
    lines = [f"stop={stop!r}{declared} reason={result.reason!r}"]
    for index, message in enumerate(result.state.messages):
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            calls = ", ".join(
                f"{c.get('id')}:{c.get('function', {}).get('name')}({c.get('function', {}).get('arguments')})"
                for c in message["tool_calls"]
            )
            lines.append(
                f"  [{index}] assistant proposes {calls}"
                + (f"  thought={message.get('content')!r}" if message.get("content") else "")
            )
        elif role == "tool":
            shown = content_text(message["content"]) if has_parts(message) else message.get("content")
            lines.append(f"  [{index}] tool {message.get('tool_call_id')}: {shown}")
        else:
            lines.append(f"  [{index}] {role}: {_shown(message)[:120]}")
    return "\n".join(lines)


def _shown(message: Any) -> str:
    """A message's content for a report: images and files as their placeholders, never their bytes."""
    return content_text(message["content"]) if has_parts(message) else json.dumps(message.get("content"))
