"""
The async driver: :func:`arun`, :func:`aadvance`, :func:`aresume` and :func:`astream`.

Same arguments, same results and the very same steps as the sync driver
(:mod:`agent_fsm.engine.driver`); only the waiting differs. A model's
``async def achat`` is preferred to its ``chat``; ``async`` gates,
handlers, answer checks and event sinks are awaited; a ``blocking`` tool
(or model) runs in a worker thread. Imported only when used, so a
synchronous program never loads ``asyncio``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from agent_fsm.engine.approval import Seen
from agent_fsm.engine.async_steps import adrive
from agent_fsm.engine.callbacks import AnswerCheck
from agent_fsm.engine.checkpoint import Checkpointer
from agent_fsm.engine.driver import EventSink
from agent_fsm.engine.endings import EndingRule
from agent_fsm.engine.events import RunEvent
from agent_fsm.engine.gates import Gate
from agent_fsm.engine.launch import Launch, continuing, deciding, interrupted, starting
from agent_fsm.engine.limits import Limits
from agent_fsm.engine.models import Model
from agent_fsm.engine.observe import TokenEstimator, estimate_tokens
from agent_fsm.engine.state import RunResult, RunState
from agent_fsm.engine.tools import Registry

__all__ = ["RunCancelled", "aadvance", "arun", "aresume", "astream"]


class RunCancelled(asyncio.CancelledError):
    """
    The task running an async driver was cancelled; ``state`` is where the run stands.

    The state is consistent and saveable: an effect in flight was finished
    and recorded first, a model call in flight is undone (the run rests in
    ``Ready`` and asks again). Continue it with :func:`aadvance` (or
    :func:`agent_fsm.advance`); with a store it was committed as it stands.
    It is a ``CancelledError``, so code that does not look for it still
    sees the cancellation it asked for.
    """

    def __init__(self, message: str, *, state: RunState) -> None:
        super().__init__(message)
        self.state = state


async def _performed(launch: Launch, on_event: EventSink | None) -> RunResult:
    context, steps = launch
    try:
        return await adrive(steps, context.outbox, on_event)
    except RunCancelled:
        raise
    except asyncio.CancelledError as exc:
        interrupted(context)
        raise RunCancelled(
            f"the run was cancelled in {context.state.machine_state!r}; continue it with aadvance", state=context.state
        ) from exc
    except BaseException as exc:
        context.settle_clock()
        if getattr(exc, "state", False) is None:
            exc.state = context.state  # type: ignore[attr-defined]  # a RunError raised before it knew the run
        raise


async def arun(
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
    :func:`agent_fsm.run`, awaited: run ``task`` to a typed ending without blocking the event loop.

    ``Limits(max_seconds=...)`` also bounds a model call in flight by the
    time left. Cancelling the task raises :class:`RunCancelled` carrying the
    run's consistent state.

    Raises:
        RunCancelled: the task was cancelled (``.state`` is the run, ready for :func:`aadvance`).
        HandlerError: a handler raised an unexpected exception (``.state`` keeps the run).
        GateError: the gate raised or answered something that is not a verdict.
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
    return await _performed(launch, on_event)


async def astream(
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
) -> AsyncIterator[RunEvent]:
    """
    :func:`arun`, as an async iterator of its events, text deltas as they arrive; the last is ``Ended``.

    The run goes on in a task of its own; leaving the loop early cancels it.
    An exception the run raised is raised here after its last event.
    """
    queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()
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
        listening=True,
    )

    async def work() -> RunResult:
        try:
            return await _performed(launch, queue.put_nowait)
        finally:
            queue.put_nowait(None)

    task_ = asyncio.ensure_future(work())
    try:
        while (event := await queue.get()) is not None:
            yield event
        await task_
    finally:
        if not task_.done():
            task_.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task_


async def aadvance(
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
    """:func:`agent_fsm.advance`, awaited: drive ``state`` on until it rests (also how a cancelled run goes on)."""
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
    return await _performed(launch, on_event)


async def aresume(
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
    :func:`agent_fsm.resume`, awaited: decide a paused run once.

    Of two decisions on one state racing in the same event loop, exactly one
    goes through; the other raises :class:`agent_fsm.NotPaused`.
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
    return await _performed(launch, on_event)
