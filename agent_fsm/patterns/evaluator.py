"""
The evaluator-optimizer: draft, check against a code-owned criterion, revise within a budget.

Thanks to the criterion, revising is not the same as retrying blindly: code
decides acceptance, and each rejection feeds its critique into the next
prompt. The revision budget bounds the loop; spending it is a typed ending
(``revision_budget_exhausted``), never a silently returned last draft. A
lenient criterion lets drafts pass on surface edits alone, so it needs as
much care as the prompt does.
"""

from __future__ import annotations

from collections.abc import Callable

from agent_fsm.engine import DefinitionError, Edge, Gate, MachineSpec, Model, Registry, StateSpec, compile_machine
from agent_fsm.patterns._common import (
    PROVIDER_ERROR,
    READY,
    SHARED_VOCABULARY,
    STEP_FAILED,
    STEPPING,
    STEPS_BUDGET,
    PatternEnding,
    PatternResult,
    Plan,
    Results,
    _consult,
    _drive,
    _new_run,
    _PatternRun,
    continue_plan,
    stepping_edges,
)
from agent_fsm.patterns.meter import Meter

__all__ = ["EVALUATOR_MACHINE", "Criterion", "evaluator"]

Criterion = Callable[[str, Results], "str | None"]
"""Judges one draft: ``None`` accepts it, a critique (fed into the next prompt) rejects it."""

EVALUATOR_MACHINE = MachineSpec(
    name="evaluator",
    initial="Ready",
    budgets={**STEPS_BUDGET, "rounds": "drafts, at most max_rounds"},
    states=(
        READY,
        STEPPING,
        StateSpec(
            "Drafting",
            "working",
            "The model drafts (with the last critique, if any); code checks the draft.",
            on_enter=("draft_and_evaluate",),
        ),
        StateSpec("Accepted", "absorbing", "A draft met the acceptance criterion.", stop=PatternEnding.ACCEPTED.value),
        StateSpec(
            "RevisionBudgetExhausted",
            "absorbing",
            "max_rounds drafts were made and none met the criterion.",
            stop=PatternEnding.REVISION_BUDGET_EXHAUSTED.value,
        ),
        STEP_FAILED,
        PROVIDER_ERROR,
    ),
    edges=(
        *continue_plan("Ready", "begin", then="Drafting"),
        *stepping_edges(then="Drafting"),
        Edge("Drafting", "evaluate", "ProviderError", guard="provider_failed", meaning="model call failed"),
        Edge("Drafting", "evaluate", "Accepted", guard="draft_accepted", meaning="criterion met"),
        Edge(
            "Drafting",
            "evaluate",
            "RevisionBudgetExhausted",
            guard="revision_budget_spent",
            meaning="criterion failed, no rounds left",
        ),
        Edge("Drafting", "evaluate", "Drafting", consumes="rounds", meaning="criterion failed; critique fed back"),
    ),
)
"""The evaluator's machine: draft, judge against the criteria, revise within a round budget."""


def draft_accepted(run: _PatternRun) -> bool:
    """The latest draft met the criterion."""
    return bool(run.drafts) and run.extra["critique"] is None


def revision_budget_spent(run: _PatternRun) -> bool:
    """``max_rounds`` drafts were made."""
    max_rounds: int = run.extra["max_rounds"]
    return len(run.drafts) >= max_rounds


def draft_and_evaluate(run: _PatternRun) -> None:
    """Ask for a draft (carrying the last critique) and judge it by the criterion."""
    assert run.plan is not None and run.plan.draft is not None
    results = dict(run.results)
    prompt = run.plan.draft(results)
    critique = run.extra["critique"]
    if critique is not None:
        prompt += f"\nYour last draft was not accepted: {critique} Revise it."
    text = _consult(run, prompt)
    if text is None:
        return
    run.drafts.append(text)
    verdict = run.extra["criterion"](text, results)
    run.extra["critique"] = None if verdict is None else str(verdict)
    if verdict is None:
        run.output = text
    else:
        run.reason = (
            f"{len(run.drafts)} of {run.extra['max_rounds']} drafts made, none accepted; last critique: {verdict}"
        )


_MACHINE = compile_machine(
    EVALUATOR_MACHINE,
    {
        **SHARED_VOCABULARY,
        "draft_accepted": draft_accepted,
        "revision_budget_spent": revision_budget_spent,
        "draft_and_evaluate": draft_and_evaluate,
    },
)


def evaluator(
    plan: Plan,
    criterion: Criterion,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None = None,
    meter: Meter | None = None,
    max_rounds: int = 3,
) -> PatternResult:
    """
    Run ``plan``'s steps, then draft until ``criterion`` accepts a draft or ``max_rounds`` drafts were made.

    Endings: ``accepted`` (``output`` is the accepted draft),
    ``revision_budget_exhausted`` (no output; every draft is in ``drafts``
    and ``reason`` carries the last critique), ``step_failed``, ``provider_error``.

    Raises:
        DefinitionError: ``plan`` has no ``draft`` (there would be nothing to evaluate).
        ValueError: ``max_rounds`` is not a positive integer.
    """
    if plan.draft is None:
        raise DefinitionError("the evaluator revises model drafts: give the plan draft=, not compose=")
    if not isinstance(max_rounds, int) or isinstance(max_rounds, bool) or max_rounds < 1:
        raise ValueError(f"max_rounds must be a positive integer, got {max_rounds!r}")
    run = _new_run(model, tools, gate, meter, plan)
    run.extra.update(criterion=criterion, max_rounds=max_rounds, critique=None)
    return _drive(_MACHINE, run)
