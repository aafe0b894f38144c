"""
What the workflow patterns share: endings, plans, the per-run object, and the plan's states.

A pattern differs from another only in what decides the next move. What they
share lives here once: the typed endings, the code-owned :class:`Plan`
(steps, then a reply), the states that walk a plan (``Stepping``,
``Drafting``) with their guards and effects, and the driver that turns a
resting machine state into a :class:`PatternResult`. Every tool call goes
through :meth:`agent_fsm.patterns.meter.Meter.attempt`, the shared effect boundary.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from agent_fsm.engine import (
    DEFAULT_LAST_WORD,
    CompiledMachine,
    DefinitionError,
    Edge,
    Gate,
    Model,
    Observation,
    Registry,
    RunError,
    RunResult,
    StateSpec,
    Stop,
    ToolCall,
    answer_message,
    assistant_text,
    deny_effects,
    normalise_reply,
)
from agent_fsm.patterns.meter import Meter, Spend

__all__ = ["PatternEnding", "PatternResult", "Plan", "Results", "ScriptedReplies", "Step"]


class PatternEnding(str, enum.Enum):
    """
    How a workflow pattern ended. Callers branch on these, never on prose.

    Every member is absorbing. ``PROVIDER_ERROR`` means what
    :attr:`agent_fsm.Stop.PROVIDER_ERROR` means (and has the same value); the
    adaptive agent reports the run machine's own :class:`agent_fsm.Stop`.
    """

    REPLIED = "replied"  # the code-owned path completed and a reply was drafted or composed
    ACCEPTED = "accepted"  # evaluator: a draft met the acceptance criterion
    REVISION_BUDGET_EXHAUSTED = "revision_budget_exhausted"  # evaluator: every allowed draft failed the criterion
    UNROUTABLE = "unroutable"  # router: the model's route names no branch
    FAN_OUT_REFUSED = "fan_out_refused"  # parallel: the batch was not safe to fan out; nothing ran
    STEP_FAILED = "step_failed"  # a code-owned call was refused, invalid or failed; later steps did not run
    STEP_DENIED = "step_denied"  # plan: the gate refused a planned step when its turn came; later steps did not run
    PLAN_REJECTED = "plan_rejected"  # plan: the model's reply was not a plan; nothing ran
    PROVIDER_ERROR = "provider_error"  # the model could not be reached; no reply is made up

    def __str__(self) -> str:
        return self.value


Results = Mapping[str, Any]
"""What the code-owned calls returned so far: call id -> content of its ``ok`` observation."""

Step = Callable[[Results], ToolCall]
"""One code-owned step: builds its call from the results so far (for example, refund what the lookup says was paid)."""


def _as_steps(steps: Iterable[Step]) -> tuple[Step, ...]:
    return tuple(steps)


def _exactly_one_reply(plan: Plan, attribute: Any, value: Any) -> None:
    if (plan.draft is None) == (plan.compose is None):
        raise DefinitionError(
            "a Plan replies one way: give draft= (the model writes the reply from a prompt) "
            f"or compose= (code writes it), got draft={plan.draft!r} and compose={plan.compose!r}"
        )


@attrs.frozen
class Plan:
    """
    A code-owned path: steps run in order through the effect boundary, then one reply.

    ``draft`` builds the prompt from which the model writes the reply (one
    model call); ``compose`` writes the reply in code (no model call). Give
    exactly one.

    Raises:
        DefinitionError: both or neither of ``draft`` and ``compose`` were given.
    """

    steps: tuple[Step, ...] = attrs.field(default=(), converter=_as_steps)
    draft: Callable[[Results], str] | None = None
    compose: Callable[[Results], str] | None = attrs.field(default=None, validator=_exactly_one_reply)


@attrs.frozen
class PatternResult:
    """
    A pattern's typed ending, its output, what it spent, and every observation.

    ``output`` is the reply, present only for the endings that deliver one
    (``replied``, ``accepted``, the agent's ``answered``): a revision budget
    spent is not a silent last draft (every draft is in ``drafts``).
    ``reason`` says in words why a pattern stopped short. ``run`` is the
    adaptive agent's own :class:`agent_fsm.RunResult`.
    """

    pattern: str
    ending: PatternEnding | Stop
    output: str | None
    spend: Spend
    observations: tuple[Observation, ...]
    reason: str | None = None
    route: str | None = None
    drafts: tuple[str, ...] = ()
    run: RunResult | None = None


class ScriptedReplies:
    """
    A model that plays its replies in order, one per call, whatever prompt it is sent.

    The workflow patterns send each model call a fresh prompt (code, not a
    transcript, carries the state), so a script cannot find its place in the
    prompt the way :class:`agent_fsm.ScriptedModel` does; this one counts
    calls instead. When the script is spent it answers :data:`agent_fsm.engine._models.DEFAULT_LAST_WORD`.
    """

    def __init__(self, replies: Sequence[Any]) -> None:
        self.replies = list(replies)
        self.calls = 0

    def __repr__(self) -> str:
        return f"ScriptedReplies({self.replies!r})"

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        """The next scripted reply (raised instead, if it is an exception)."""
        index, self.calls = self.calls, self.calls + 1
        reply = self.replies[index] if index < len(self.replies) else answer_message(DEFAULT_LAST_WORD)
        if isinstance(reply, BaseException):
            raise reply
        return reply


@attrs.define(eq=False)
class _PatternRun:
    """One pattern run in flight: what it runs against and what it has learned (passed to every event)."""

    model: Model
    tools: Registry
    gate: Gate
    meter: Meter
    plan: Plan | None = None
    machine_state: str = "Ready"
    next_step: int = 0
    results: dict[str, Any] = attrs.field(factory=dict)
    observations: list[Observation] = attrs.field(factory=list)
    failed: Observation | None = None
    fault: str | None = None
    output: str | None = None
    reason: str | None = None
    drafts: list[str] = attrs.field(factory=list)
    # pattern-specific inputs and findings, set by the pattern that uses them
    extra: dict[str, Any] = attrs.field(factory=dict)


def _new_run(model: Model, tools: Registry, gate: Gate | None, meter: Meter | None, plan: Plan | None) -> _PatternRun:
    # The secure default, as in agent_fsm.run: reads run, effectful tools are refused.
    return _PatternRun(model, tools, gate if gate is not None else deny_effects(tools), meter or Meter(), plan)


def _drive(
    machine: CompiledMachine, run: _PatternRun, ending_type: type[PatternEnding] | type[Stop] = PatternEnding
) -> PatternResult:
    """Advance ``run`` until it rests and report its typed ending."""
    machine.advance(run)
    return _result(machine, run, ending_type)


def _result(
    machine: CompiledMachine, run: _PatternRun, ending_type: type[PatternEnding] | type[Stop] = PatternEnding
) -> PatternResult:
    """The typed ending of ``run``, which rests."""
    stop = machine.spec.state(run.machine_state).stop
    assert stop is not None, "the driver returned from a working state"
    ending = ending_type(stop)
    delivered = ending in (PatternEnding.REPLIED, PatternEnding.ACCEPTED, Stop.ANSWERED)
    return PatternResult(
        pattern=machine.spec.name,
        ending=ending,
        output=run.output if delivered else None,
        spend=run.meter.spend(),
        observations=tuple(run.observations),
        reason=None if delivered else run.reason,
        route=run.extra.get("route"),
        drafts=tuple(run.drafts),
        run=run.extra.get("run_result"),
    )


# --- crossing the boundary and consulting the model ---------------------------


def _attempt(run: _PatternRun, call: ToolCall) -> Observation:
    """Carry one code-owned call across the boundary (charged) and record what happened."""
    observation = run.meter.attempt(call, run.tools, run.gate)
    _record(run, call, observation)
    return observation


def _record(run: _PatternRun, call: ToolCall, observation: Observation) -> None:
    run.observations.append(observation)
    if observation.ok:
        run.results[observation.call_id] = observation.content
    elif run.failed is None:
        run.failed = observation
        run.reason = f"{call.name} [{call.call_id}] came back {observation.kind}: {observation.content}"


def _consult(run: _PatternRun, prompt: str) -> str | None:
    """
    Ask the model once (charged) and return the text of its reply; ``None`` when it could not be reached.

    The model is given no tools here: code owns every call, so a proposal in
    the reply is ignored and only its text counts.
    """
    try:
        reply = run.meter.ask(run.model, [{"role": "user", "content": prompt}])
    except Exception as exc:
        _unreachable(run, exc)
        return None
    return _reply_text(run, reply)


def _unreachable(run: _PatternRun, exc: Exception) -> None:
    """Record a model call that raised ``OSError`` as a provider fault; anything else is a bug, raised."""
    if not isinstance(exc, OSError):
        raise RunError(f"the model raised {type(exc).__name__}: {exc}") from exc
    run.fault = run.reason = f"the model could not be reached: {type(exc).__name__}: {exc}"


def _reply_text(run: _PatternRun, reply: Any) -> str:
    """The text of a model's reply; a proposal in it is ignored (code owns every call)."""
    message, _ignored_calls = normalise_reply(reply, run.meter.model_calls)
    return assistant_text(message) or ""


# --- guards shared by the plan's states: pure predicates over the run ---------


def step_failed(run: _PatternRun) -> bool:
    """A code-owned call came back refused, invalid or failed."""
    return run.failed is not None


def steps_remain(run: _PatternRun) -> bool:
    """The plan has steps not yet run."""
    return run.plan is not None and run.next_step < len(run.plan.steps)


def plan_drafts(run: _PatternRun) -> bool:
    """The plan's reply is drafted by the model."""
    return run.plan is not None and run.plan.draft is not None


def provider_failed(run: _PatternRun) -> bool:
    """The last model call raised an ``OSError``."""
    return run.fault is not None


# --- effects shared by the plan's states: on-enter callbacks ------------------


def run_next_step(run: _PatternRun) -> None:
    """Build the next step's call from the results so far and carry it across the boundary."""
    assert run.plan is not None
    step = run.plan.steps[run.next_step]
    run.next_step += 1
    _attempt(run, step(dict(run.results)))


def draft_reply(run: _PatternRun) -> None:
    """Ask the model for the reply, from the plan's drafting prompt."""
    assert run.plan is not None and run.plan.draft is not None
    text = _consult(run, run.plan.draft(dict(run.results)))
    if text is not None:
        run.drafts.append(text)
        run.output = text


def compose_reply(run: _PatternRun) -> None:
    """Let code write the reply when the model drafted none."""
    if run.output is None and run.plan is not None and run.plan.compose is not None:
        run.output = run.plan.compose(dict(run.results))


SHARED_VOCABULARY: dict[str, Callable[[Any], Any]] = {
    f.__name__: f
    for f in (step_failed, steps_remain, plan_drafts, provider_failed, run_next_step, draft_reply, compose_reply)
}


# --- the plan's states and edges, as rows the pattern tables include ----------

READY = StateSpec("Ready", "working", "Nothing has run yet.")
STEPPING = StateSpec(
    "Stepping",
    "working",
    "One code-owned step of the plan is crossing the effect boundary.",
    on_enter=("run_next_step",),
)
DRAFTING = StateSpec(
    "Drafting", "working", "The model is drafting the reply from the plan's prompt.", on_enter=("draft_reply",)
)
REPLIED = StateSpec(
    "Replied",
    "absorbing",
    "The plan completed; the reply was drafted or composed.",
    on_enter=("compose_reply",),
    stop=PatternEnding.REPLIED.value,
)
STEP_FAILED = StateSpec(
    "StepFailed",
    "absorbing",
    "A code-owned call was refused, invalid or failed; nothing after it ran.",
    stop=PatternEnding.STEP_FAILED.value,
)
PROVIDER_ERROR = StateSpec(
    "ProviderError", "absorbing", "The model could not be reached.", stop=PatternEnding.PROVIDER_ERROR.value
)


def continue_plan(source: str, event: str, *, consumes: str | None = None, then: str = "Replied") -> tuple[Edge, ...]:
    """
    The rows that carry a run from ``source`` into the rest of its plan.

    Next step if any remain (spending ``consumes``), else the draft if the
    model writes the reply, else ``then``.
    """
    onward = Edge(source, event, "Stepping", guard="steps_remain", consumes=consumes, meaning="next code-owned step")
    if then == "Drafting":  # a plan that always drafts (the evaluator's)
        return (onward, Edge(source, event, "Drafting", meaning="steps done; the model drafts"))
    return (
        onward,
        Edge(source, event, "Drafting", guard="plan_drafts", meaning="steps done; the model drafts"),
        Edge(source, event, then, meaning="steps done; code composes the reply"),
    )


def stepping_edges(*, then: str = "Replied") -> tuple[Edge, ...]:
    """The rows leaving ``Stepping``: stop at the first failed call, else continue the plan."""
    return (
        Edge("Stepping", "observe", "StepFailed", guard="step_failed", meaning="call refused, invalid or failed"),
        *continue_plan("Stepping", "observe", consumes="steps", then=then),
    )


DRAFTING_EDGES = (
    Edge("Drafting", "reply", "ProviderError", guard="provider_failed", meaning="model call failed"),
    Edge("Drafting", "reply", "Replied", meaning="the draft is the reply"),
)

STEPS_BUDGET = {"steps": "the plan's code-owned steps, a fixed finite tuple"}

PLAN_STATES = (STEPPING, DRAFTING, REPLIED, STEP_FAILED, PROVIDER_ERROR)
"""The states that walk a plan to its reply, shared by the chain, the router and the fan-out."""

PLAN_EDGES = (*stepping_edges(), *DRAFTING_EDGES)
"""The rows among :data:`PLAN_STATES`."""
