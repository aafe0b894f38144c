"""
The adaptive agent: the model chooses every step, within the gated action space.

This pattern is a thin wrapper over an :class:`agent_fsm.Agent`: the run
machine already proposes, judges, executes and budgets. The wrapper's
machine has one working state that delegates, and one resting state per
resting state of :data:`agent_fsm.RUN_MACHINE`, so the agent's endings are
exactly the run machine's :class:`agent_fsm.Stop` (a pause for approval
included, continued with :func:`resume_agent`, which takes the agent again:
its gate judges the decision). Model calls are charged by the meter as they
are made; the run's observations are its tool calls.
"""

from __future__ import annotations

from collections.abc import Callable

from agent_fsm import Agent
from agent_fsm.engine import RUN_MACHINE, Edge, MachineSpec, NotPaused, RunResult, StateSpec, Stop, compile_machine
from agent_fsm.patterns._common import (
    READY,
    PatternResult,
    _drive,
    _new_run,
    _PatternRun,
)
from agent_fsm.patterns.meter import Meter

__all__ = ["AGENT_MACHINE", "agent", "resume_agent"]

_RESTING = tuple(s for s in RUN_MACHINE.states if s.is_resting)


def _ended(stop: str) -> Callable[[_PatternRun], bool]:
    def guard(run: _PatternRun) -> bool:
        result: RunResult = run.extra["run_result"]
        return result.stop.value == stop

    guard.__name__ = f"run_ended_{stop}"
    guard.__doc__ = f"The run machine rested in {stop!r}."
    return guard


_GUARDS = {g.__name__: g for g in (_ended(s.stop) for s in _RESTING if s.stop is not None)}

AGENT_MACHINE = MachineSpec(
    name="agent",
    initial="Ready",
    budgets={
        "decisions": "human decisions; each ends one pause, and every pause holds a call the model proposed"
        " within the run's own turn budget",
    },
    states=(
        READY,
        StateSpec(
            "Delegating",
            "working",
            "The run machine drives model, gate and tools until it rests.",
            on_enter=("delegate_to_run",),
        ),
        *(StateSpec(s.name, s.kind, s.doc, stop=s.stop) for s in _RESTING),
    ),
    edges=(
        Edge("Ready", "begin", "Delegating", meaning="hand the task to the run machine"),
        *(
            Edge("Delegating", "settle", s.name, guard=f"run_ended_{s.stop}", meaning=f"the run rested {s.stop}")
            for s in _RESTING
        ),
        Edge("AwaitingApproval", "approve", "Delegating", consumes="decisions", meaning="a human approved the call"),
        Edge("AwaitingApproval", "reject", "Delegating", consumes="decisions", meaning="a human rejected the call"),
    ),
)
"""The adaptive agent's machine: one run of the run machine, reported as a pattern result."""


def delegate_to_run(run: _PatternRun) -> None:
    """Run (or, after a human's decision, resume) the run machine; charge what it spent."""
    x = run.extra
    metered = run.meter.metered(x["agent"])
    decision = x.pop("decision", None)
    if decision is None:
        start = 0
        result = metered.run(x["task"])
    else:
        approve, reason = decision
        previous = x["run_result"]
        start = len(previous.state.observations)
        result = metered.resume(previous.state, approve=approve, reason=reason)
    run.meter.charge_attempts(result.state.observations[start:])
    x["run_result"] = result
    run.observations[:] = result.state.observations
    run.output = result.answer
    run.reason = result.reason


_MACHINE = compile_machine(AGENT_MACHINE, {**_GUARDS, "delegate_to_run": delegate_to_run})


def agent(task: str, agent: Agent, *, meter: Meter | None = None) -> PatternResult:
    """
    Hand ``task`` to ``agent`` (:meth:`agent_fsm.Agent.run`); report its ending as a :class:`PatternResult`.

    ``ending`` is the run's :class:`agent_fsm.Stop`; ``run`` is its full
    :class:`agent_fsm.RunResult`. Every model call ``agent`` makes, and
    every tool call it attempts, is charged to ``meter``.
    """
    state = _started(agent, meter)
    state.extra["task"] = task
    return _drive(_MACHINE, state, Stop)


def resume_agent(result: PatternResult, agent: Agent, *, approve: bool, reason: str = "") -> PatternResult:
    """
    Decide an agent paused ``awaiting_approval`` and go on (:meth:`agent_fsm.Agent.resume`).

    ``agent`` is the one that paused (or a variant of it): its gate judges
    the blocked call again. The spend carries on from ``result``'s.

    Raises:
        NotPaused: ``result`` is not an agent awaiting approval.
    """
    if result.pattern != AGENT_MACHINE.name or result.ending is not Stop.AWAITING_APPROVAL or result.run is None:
        raise NotPaused(
            f"only an agent awaiting approval can be resumed; got the {result.pattern} pattern ended {result.ending}"
        )
    spent = result.spend
    state = _started(
        agent, Meter(model_calls=spent.model_calls, tool_calls=spent.tool_calls, prompt_tokens=spent.prompt_tokens)
    )
    state.extra.update(run_result=result.run, decision=(approve, reason))
    state.machine_state = "AwaitingApproval"
    _MACHINE.fire(state, "approve" if approve else "reject")
    return _drive(_MACHINE, state, Stop)


def _started(agent: Agent, meter: Meter | None) -> _PatternRun:
    state = _new_run(agent.model, agent.tools, agent.gate, meter, None)
    state.extra["agent"] = agent
    return state
