"""
Plan, then execute: the model proposes a plan once; code runs it step by step and stops at the first failure.

A plan is a hypothesis about the future, not a grant of authority. The
model writes the whole plan in one reply (a JSON array of ``{"tool", "arguments"}``
steps) before it has seen any result; code then carries each step across
the same effect boundary as every other pattern (validation, the gate
consulted at the moment the step would run, the handler), so a step the
gate would refuse on its own is refused inside a plan too. The executor
stops at the first step that is denied, invalid or fails; nothing after it
runs. With ``replans`` > 0 the planner is asked again, once per replan,
with the failure and the results so far in view (plan-execute-replan);
the replan budget makes that loop finite.

Endings: ``replied`` (every step of a plan ran; the reply, written by code,
lists them), ``step_denied`` (the gate refused a step), ``step_failed`` (a
step was invalid or its handler failed), ``plan_rejected`` (the reply was
not a plan), ``provider_error``.
"""

from __future__ import annotations

import json
from typing import Any

from agent_fsm.engine import Edge, Gate, MachineSpec, Model, Registry, StateSpec, ToolCall, compile_machine
from agent_fsm.patterns._common import (
    PROVIDER_ERROR,
    READY,
    REPLIED,
    SHARED_VOCABULARY,
    STEP_FAILED,
    STEPPING,
    PatternEnding,
    PatternResult,
    Plan,
    Results,
    Step,
    _consult,
    _drive,
    _new_run,
    _PatternRun,
)
from agent_fsm.patterns.meter import Meter

__all__ = ["PLAN_MACHINE", "parse_plan", "plan_and_execute", "plan_prompt"]

PLAN_MACHINE = MachineSpec(
    name="plan",
    initial="Ready",
    budgets={
        "steps": "the steps of the current plan, a finite list",
        "replans": "plans the model may propose after a failed step, at most replans",
    },
    states=(
        READY,
        StateSpec(
            "Planning",
            "working",
            "The model proposes the whole plan in one reply; code parses it.",
            on_enter=("propose_plan",),
        ),
        StateSpec(
            "PlanRejected",
            "absorbing",
            "The reply was not a plan of 1..max_steps steps; nothing ran.",
            stop=PatternEnding.PLAN_REJECTED.value,
        ),
        STEPPING,
        StateSpec(
            "StepDenied",
            "absorbing",
            "The gate refused a planned step when it was about to run; nothing after it ran.",
            stop=PatternEnding.STEP_DENIED.value,
        ),
        STEP_FAILED,
        REPLIED,
        PROVIDER_ERROR,
    ),
    edges=(
        Edge("Ready", "begin", "Planning", meaning="ask for the plan"),
        Edge("Planning", "planned", "ProviderError", guard="provider_failed", meaning="model call failed"),
        Edge("Planning", "planned", "PlanRejected", guard="plan_unreadable", meaning="not a plan"),
        Edge("Planning", "planned", "Stepping", meaning="run the first step"),
        Edge("Stepping", "observe", "Planning", guard="may_replan", consumes="replans", meaning="step failed; replan"),
        Edge("Stepping", "observe", "StepDenied", guard="step_denied", meaning="the gate refused the step"),
        Edge("Stepping", "observe", "StepFailed", guard="step_failed", meaning="step invalid or failed"),
        Edge("Stepping", "observe", "Stepping", guard="steps_remain", consumes="steps", meaning="next planned step"),
        Edge("Stepping", "observe", "Replied", meaning="every step ran; code writes the reply"),
    ),
)
"""The plan executor's declaration: plan once, step through the boundary, stop at the first failure or replan."""


def plan_prompt(task: str, tools: Registry, max_steps: int) -> str:
    """What the planner is asked: the task, the tools, and the exact shape of a plan."""
    catalogue = "; ".join(f"{name}: {spec.description}" for name, spec in tools.items())
    return (
        f"Task: {task}\nTools: {catalogue}\n"
        f'Reply with the whole plan and nothing else: a JSON array of 1 to {max_steps} steps, each {{"tool": <name>, '
        '"arguments": {...}}. Each step runs only if the policy allows it when its turn comes.'
    )


def parse_plan(text: str, max_steps: int) -> tuple[list[tuple[str, dict[str, Any]]] | None, str | None]:
    """
    Read a plan from a reply: ``(steps, None)``, or ``(None, why not)``.

    Only the shape is checked here (a list of ``{"tool": str, "arguments":
    object}``); each step's arguments meet their contract, and the gate,
    only when that step runs.
    """
    try:
        data = json.loads(text)
    except ValueError:
        return None, f"the reply is not JSON: {text[:80]!r}"
    if not isinstance(data, list) or not 1 <= len(data) <= max_steps:
        return None, f"a plan is a JSON array of 1..{max_steps} steps; got {type(data).__name__} {str(data)[:80]}"
    steps: list[tuple[str, dict[str, Any]]] = []
    for index, step in enumerate(data, start=1):
        if (
            not isinstance(step, dict)
            or set(step) != {"tool", "arguments"}
            or not isinstance(step["tool"], str)
            or not isinstance(step["arguments"], dict)
        ):
            return None, f'step {index} must be exactly {{"tool": <name>, "arguments": {{...}}}}; got {str(step)[:80]}'
        steps.append((step["tool"], step["arguments"]))
    return steps, None


def _step(call_id: str, name: str, arguments: dict[str, Any]) -> Step:
    def step(results: Results) -> ToolCall:
        return ToolCall(call_id, name, dict(arguments))

    step.__name__ = f"{name}[{call_id}]"
    return step


def _summary(run: _PatternRun) -> Any:
    def compose(results: Results) -> str:
        assert run.plan is not None
        done = ", ".join(f"{s.__name__}" for s in run.plan.steps)
        return f"Plan v{run.extra['plans']} completed {len(run.plan.steps)} of {len(run.plan.steps)} steps: {done}."

    return compose


# --- guards and effects --------------------------------------------------------


def plan_unreadable(run: _PatternRun) -> bool:
    """The planner's reply was not a plan."""
    return run.plan is None


def step_denied(run: _PatternRun) -> bool:
    """The gate refused the step that was about to run."""
    return run.failed is not None and run.failed.kind == "denied"


def may_replan(run: _PatternRun) -> bool:
    """A step failed and the replan budget is not spent."""
    return run.failed is not None and run.extra["plans"] <= run.extra["replans"]


def propose_plan(run: _PatternRun) -> None:
    """Ask the model for a plan (with the last failure in view on a replan) and parse it."""
    prompt = plan_prompt(run.extra["task"], run.tools, run.extra["max_steps"])
    if run.failed is not None:
        prompt += (
            f"\nPlan v{run.extra['plans']} stopped: {run.reason}. "
            f"Results so far: {json.dumps(run.results, default=str)}. Replan from here."
        )
    run.plan, run.failed, run.next_step = None, None, 0
    text = _consult(run, prompt)
    if text is None:
        return
    run.drafts.append(text)
    run.extra["plans"] += 1
    steps, problem = parse_plan(text, run.extra["max_steps"])
    if steps is None:
        run.reason = f"plan v{run.extra['plans']} rejected: {problem}"
        return
    number = run.extra["plans"]
    run.plan = Plan(
        steps=[_step(f"p{number}s{index}", name, arguments) for index, (name, arguments) in enumerate(steps, 1)],
        compose=_summary(run),
    )
    run.reason = None


_MACHINE = compile_machine(
    PLAN_MACHINE,
    {
        **SHARED_VOCABULARY,
        "plan_unreadable": plan_unreadable,
        "step_denied": step_denied,
        "may_replan": may_replan,
        "propose_plan": propose_plan,
    },
)


def plan_and_execute(
    task: str,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None = None,
    meter: Meter | None = None,
    replans: int = 0,
    max_steps: int = 8,
) -> PatternResult:
    """
    Ask ``model`` for a plan for ``task`` once, then run its steps in order through the effect boundary.

    The run stops at the first step that is denied (``step_denied``), invalid
    or failed (``step_failed``); with ``replans`` left the model is asked for
    a new plan instead, seeing the failure and the results so far. ``drafts``
    holds every plan the model proposed; ``reason`` names the step that
    stopped the run. ``gate=None`` is the secure default (effectful tools refused).

    Raises:
        ValueError: ``replans`` is negative or ``max_steps`` is not positive (or either is not an int).
    """
    for name, value, least in (("replans", replans, 0), ("max_steps", max_steps, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} must be an integer of at least {least}, got {value!r}")
    run = _new_run(model, tools, gate, meter, None)
    run.extra.update(task=task, replans=replans, max_steps=max_steps, plans=0)
    return _drive(_MACHINE, run)
