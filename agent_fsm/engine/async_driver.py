"""
How :meth:`agent_fsm.Agent.arun` and its twins perform a run's steps: awaited, cancellation deferred.

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
from collections.abc import AsyncIterator, Callable
from typing import Any

from agent_fsm.engine.async_steps import adrive
from agent_fsm.engine.events import RunEvent
from agent_fsm.engine.launch import Launch, interrupted
from agent_fsm.engine.state import RunResult, RunState

__all__ = ["RunCancelled", "performed", "streamed"]


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


async def performed(launch: Launch, on_event: Callable[[RunEvent], Any] | None) -> RunResult:
    """Await ``launch``'s steps to the run's rest; a cancellation becomes :class:`RunCancelled` with the state."""
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


async def streamed(launch: Launch) -> AsyncIterator[RunEvent]:
    """The events of ``launch`` as they happen; the run goes on in a task of its own, cancelled if left early."""
    queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()

    async def work() -> RunResult:
        try:
            return await performed(launch, queue.put_nowait)
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
