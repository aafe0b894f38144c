"""
The synchronous driver: run a task through the run machine to a typed ending, or resume a paused run.

The steps these functions perform are built in :mod:`agent_fsm.engine.launch`
from the guards and effects of :mod:`agent_fsm.engine.callbacks`; the table
they serve is :data:`agent_fsm.engine.machine.RUN_MACHINE`. The async twins
(:func:`agent_fsm.arun` and friends) perform the very same steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from agent_fsm.engine.approval import Seen
from agent_fsm.engine.callbacks import AnswerCheck
from agent_fsm.engine.checkpoint import Checkpointer
from agent_fsm.engine.endings import EndingRule
from agent_fsm.engine.events import RunEvent
from agent_fsm.engine.gates import Gate
from agent_fsm.engine.launch import DEFAULT_SYSTEM_PROMPT, Launch, continuing, deciding, start_state, starting
from agent_fsm.engine.limits import Limits
from agent_fsm.engine.models import Model
from agent_fsm.engine.observe import TokenEstimator, estimate_tokens
from agent_fsm.engine.state import RunResult, RunState
from agent_fsm.engine.steps import drive, iterate, perform_now
from agent_fsm.engine.tools import Registry

__all__ = ["DEFAULT_SYSTEM_PROMPT", "AnswerCheck", "EventSink", "advance", "resume", "run", "start_state", "stream"]

EventSink = Callable[[RunEvent], Any]
"""Receives each :class:`agent_fsm.events.RunEvent` as the run moves (``on_event=``); may be ``async`` under arun."""


def _performed(launch: Launch, on_event: EventSink | None) -> RunResult:
    context, steps = launch
    if context.outbox is None:  # nobody hears events between requests: perform them where they are made
        context.perform = perform_now
    try:
        return drive(steps, context.outbox, on_event)
    except BaseException as exc:
        context.settle_clock()
        if getattr(exc, "state", False) is None:
            exc.state = context.state  # type: ignore[attr-defined]  # a RunError raised before it knew the run
        raise


def run(
    task: str,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None = None,
    limits: Limits | None = None,
    system_prompt: str | None = None,
    history: Sequence[Mapping[str, Any]] = (),
    answer_check: AnswerCheck | None = None,
    estimator: TokenEstimator = estimate_tokens,
    endings: EndingRule | None = None,
    store: Checkpointer | None = None,
    run_id: str | None = None,
    on_event: EventSink | None = None,
) -> RunResult:
    """
    Run ``task`` to a typed ending.

    The model only proposes. Each proposal is validated against its tool's
    contract, judged by ``gate`` immediately before execution (``None`` runs
    effect-free tools and refuses effectful ones), executed, and observed;
    budgets in ``limits`` are checked before any work is admitted.
    ``history`` continues a conversation (earlier messages, e.g.
    ``previous.state.messages``); ``answer_check`` may refuse a final answer,
    which then ends the run ``answer_rejected`` instead of ``answered`` (an
    :class:`Ending` it returns also names the world's code); ``endings``
    names the world's code for the engine's stops (``RunResult.code``).
    With ``store`` (e.g. :class:`agent_fsm.store.SqliteStore`) the run is
    committed under ``run_id`` when it begins, around every effectful call
    and whenever it rests (see docs/durability.md). ``run_id`` also names
    the run's state (pause ids and idempotency keys derive from it).
    ``on_event`` receives each :mod:`agent_fsm.events` event as the run moves.

    Returns:
        A :class:`RunResult`; ``stop`` is absorbing, or ``awaiting_approval``
        (continue with :func:`resume`).

    Raises:
        HandlerError: a handler raised an unexpected exception (``.state`` keeps the run).
        GateError: the gate raised or answered something that is not a verdict.
        NotSynchronous: the model, a gate, handler or answer check is ``async`` (use :func:`agent_fsm.arun`).
    """
    launch = starting(
        task,
        model,
        tools,
        gate=gate,
        limits=limits,
        system_prompt=system_prompt,
        history=history,
        answer_check=answer_check,
        estimator=estimator,
        endings=endings,
        store=store,
        run_id=run_id,
        listening=on_event is not None,
    )
    return _performed(launch, on_event)


def stream(
    task: str,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None = None,
    limits: Limits | None = None,
    system_prompt: str | None = None,
    history: Sequence[Mapping[str, Any]] = (),
    answer_check: AnswerCheck | None = None,
    estimator: TokenEstimator = estimate_tokens,
    endings: EndingRule | None = None,
    store: Checkpointer | None = None,
    run_id: str | None = None,
) -> Iterator[RunEvent]:
    """
    :func:`run`, as an iterator of its events; the last one is :class:`agent_fsm.events.Ended` with the result.

    Nothing runs until the first event is asked for. A streaming model's
    text deltas arrive when its call returns (pass ``on_event=`` to
    :func:`run` to see them as they come).
    """
    context, steps = starting(
        task,
        model,
        tools,
        gate=gate,
        limits=limits,
        system_prompt=system_prompt,
        history=history,
        answer_check=answer_check,
        estimator=estimator,
        endings=endings,
        store=store,
        run_id=run_id,
        listening=True,
    )
    try:
        yield from iterate(steps, context.outbox)
    finally:
        context.settle_clock()


def advance(
    state: RunState,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None = None,
    limits: Limits | None = None,
    answer_check: AnswerCheck | None = None,
    estimator: TokenEstimator = estimate_tokens,
    endings: EndingRule | None = None,
    store: Checkpointer | None = None,
    run_id: str | None = None,
    on_event: EventSink | None = None,
) -> RunResult:
    """
    Drive ``state`` (modified in place) from where it is until it rests (committed to ``store``).

    ``limits=None`` keeps the limits saved with the run. A run resting in
    ``Proposing`` (one a gate or handler error stopped) has its proposal
    judged again here: a judgement found in a state is never acted on.

    Raises:
        StateError: the state's counters or indices disagree with its transcript.
    """
    launch = continuing(
        state,
        model,
        tools,
        gate=gate,
        limits=limits,
        answer_check=answer_check,
        estimator=estimator,
        endings=endings,
        store=store,
        run_id=run_id,
        listening=on_event is not None,
    )
    return _performed(launch, on_event)


def resume(
    state: RunState,
    model: Model,
    tools: Registry,
    *,
    approve: bool,
    gate: Gate | None = None,
    limits: Limits | None = None,
    reason: str = "",
    arguments: Mapping[str, Any] | None = None,
    seen: Seen | None = None,
    answer_check: AnswerCheck | None = None,
    estimator: TokenEstimator = estimate_tokens,
    endings: EndingRule | None = None,
    store: Checkpointer | None = None,
    run_id: str | None = None,
    on_event: EventSink | None = None,
) -> RunResult:
    """
    Continue a run paused in ``awaiting_approval``, once.

    ``approve=True`` judges the blocked call afresh (validated against the
    current ``tools``, the gate consulted again) and the approval turns only
    an ``ask`` about that very call (its fingerprint, recorded with the
    pause) into permission: a ``deny`` still denies, a call that now breaks
    its contract is ``invalid``, and the run's ``max_tool_calls`` still
    holds. ``arguments`` replaces the blocked call's arguments (a reviewer's
    edit); the edited call is validated and gated like a new proposal, and
    the approval covers it. ``approve=False`` turns the call into a
    ``denied`` observation carrying ``reason``. ``limits=None`` keeps the
    limits saved with the run.

    ``state`` is marked consumed (``state.consumed``); the result holds a
    new state. ``seen(pause_id)`` lets an application refuse a second
    decision on the same pause loaded again from the same saved JSON.
    ``store``/``run_id`` commit the run as :func:`run` does; to decide a
    stored pause from any process, use :func:`agent_fsm.store.approve`.

    Raises:
        TypeError: ``approve`` is not a bool.
        NotPaused: ``state`` is not awaiting approval, was resumed already, or ``seen`` says so.
        StateError: the state's counters or indices disagree with its transcript.
    """
    launch = deciding(
        state,
        model,
        tools,
        approve=approve,
        gate=gate,
        limits=limits,
        reason=reason,
        arguments=arguments,
        seen=seen,
        answer_check=answer_check,
        estimator=estimator,
        endings=endings,
        store=store,
        run_id=run_id,
        listening=on_event is not None,
    )
    return _performed(launch, on_event)
