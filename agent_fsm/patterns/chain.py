"""
The prompt chain: a path fixed in code, with the model asked only for the wording.

It fits work whose steps can be written down beforehand: code builds each
call, and the model is consulted a single time, where prose is needed.
Nothing costs less or is easier to test; the price is rigidity, since a
situation the plan never anticipated has nowhere to go.
"""

from __future__ import annotations

from agent_fsm.engine import Gate, MachineSpec, Model, Registry, compile_machine
from agent_fsm.patterns._common import (
    PLAN_EDGES,
    PLAN_STATES,
    READY,
    SHARED_VOCABULARY,
    STEPS_BUDGET,
    PatternResult,
    Plan,
    _drive,
    _new_run,
    continue_plan,
)
from agent_fsm.patterns.meter import Meter

__all__ = ["CHAIN_MACHINE", "chain"]

CHAIN_MACHINE = MachineSpec(
    name="chain",
    initial="Ready",
    budgets=STEPS_BUDGET,
    states=(READY, *PLAN_STATES),
    edges=(
        *continue_plan("Ready", "begin"),
        *PLAN_EDGES,
    ),
)
"""The chain's machine: fixed steps in order, then one reply."""

_MACHINE = compile_machine(CHAIN_MACHINE, SHARED_VOCABULARY)


def chain(
    plan: Plan, model: Model, tools: Registry, *, gate: Gate | None = None, meter: Meter | None = None
) -> PatternResult:
    """
    Run ``plan``'s steps in order through the effect boundary, then its reply.

    Endings: ``replied``; ``step_failed`` at the first call that is refused,
    invalid or fails (nothing after it runs); ``provider_error``. ``gate=None``
    is the secure default (effectful tools refused).
    """
    return _drive(_MACHINE, _new_run(model, tools, gate, meter, plan))
