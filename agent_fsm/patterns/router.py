"""
The router: the model makes one capped choice, and code runs the branch it names.

All the model does is label the task; each branch after that is plain code.
Sending a task down the wrong branch spoils every step that follows, so the
set of branches is kept short, the chosen route travels with the result,
and a label that matches no branch ends typed (``unroutable``) instead of
being guessed at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from agent_fsm.engine import Edge, Gate, MachineSpec, Model, Registry, StateSpec, compile_machine
from agent_fsm.patterns._common import (
    PLAN_EDGES,
    PLAN_STATES,
    READY,
    SHARED_VOCABULARY,
    STEPS_BUDGET,
    PatternEnding,
    PatternResult,
    Plan,
    _consult,
    _drive,
    _new_run,
    _PatternRun,
    continue_plan,
)
from agent_fsm.patterns.meter import Meter

__all__ = ["ROUTER_MACHINE", "route_prompt", "router"]

ROUTER_MACHINE = MachineSpec(
    name="router",
    initial="Ready",
    budgets=STEPS_BUDGET,
    states=(
        READY,
        StateSpec("Routing", "working", "The model is choosing one branch for the task.", on_enter=("ask_route",)),
        *PLAN_STATES,
        StateSpec(
            "Unroutable",
            "absorbing",
            "The model's route names no branch; no branch ran.",
            stop=PatternEnding.UNROUTABLE.value,
        ),
    ),
    edges=(
        Edge("Ready", "begin", "Routing", meaning="ask for a route"),
        Edge("Routing", "choose", "ProviderError", guard="provider_failed", meaning="model call failed"),
        Edge("Routing", "choose", "Unroutable", guard="route_unknown", meaning="route names no branch"),
        *continue_plan("Routing", "choose"),
        *PLAN_EDGES,
    ),
)
"""The router's machine: classify once, then follow the branch's plan."""


def route_prompt(task: str, branches: Sequence[str]) -> str:
    """The default routing question: one word, one of the branch names."""
    names = ", ".join(branches)
    return f"Route this customer request to one team. Answer with one word, one of: {names}.\nRequest: {task}"


def route_unknown(run: _PatternRun) -> bool:
    """The model answered, but its route names no branch."""
    return run.plan is None


def ask_route(run: _PatternRun) -> None:
    """Ask the model for a route and take the branch it names, if any."""
    branches: Mapping[str, Plan] = run.extra["branches"]
    text = _consult(run, run.extra["prompt"])
    if text is None:
        return
    # Tolerate the harmless noise of a one-word answer (case, spaces, a full stop), nothing more.
    wanted = text.strip().strip(".!\"'`").strip().casefold()
    route = next((name for name in branches if name.casefold() == wanted), None)
    run.extra["route"] = route
    if route is None:
        run.reason = f"the route {text!r} names no branch (expected one of {sorted(branches)})"
    else:
        run.plan = branches[route]


_MACHINE = compile_machine(
    ROUTER_MACHINE, {**SHARED_VOCABULARY, "route_unknown": route_unknown, "ask_route": ask_route}
)


def router(
    task: str,
    branches: Mapping[str, Plan],
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None = None,
    meter: Meter | None = None,
    prompt: Callable[[str, Sequence[str]], str] = route_prompt,
) -> PatternResult:
    """
    Ask the model which of ``branches`` fits ``task``, then run that branch's plan.

    The result's ``route`` is the branch taken (``None`` when none was).
    Endings: those of :func:`agent_fsm.patterns.chain`, plus ``unroutable``.

    Raises:
        ValueError: ``branches`` is empty.
    """
    if not branches:
        raise ValueError("a router needs at least one branch, got none")
    run = _new_run(model, tools, gate, meter, None)
    run.extra.update(branches=dict(branches), prompt=prompt(task, list(branches)), route=None)
    return _drive(_MACHINE, run)
