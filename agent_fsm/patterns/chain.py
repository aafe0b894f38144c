"""
The prompt chain: code owns the whole sequence and consults the model only to draft.

Reach for it when the path is known in advance: every step is a fixed,
code-built call, and the model is asked once, for the one step that needs
language. It is the cheapest and most testable shape; it cannot adapt to a
case the plan did not foresee.
"""

from __future__ import annotations

from ..gates import Gate
from ..machine import MachineSpec, compile_machine
from ..meter import Meter
from ..models import Model
from ..tools import Registry
from ._common import (
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
