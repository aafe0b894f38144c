"""
The async runner of a run's steps (see :mod:`agent_fsm.engine.steps`): requests awaited, cancellation deferred.

Cancellation is deferred across *shielded* requests, the ones inside an
effect (a handler running, the pause before its retry): the effect
finishes and is recorded, and the cancellation is raised into the run at
its next unshielded request, where nothing is half done. Kept apart from
the sync runner so a synchronous program never imports ``asyncio``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agent_fsm.engine.steps import CALL, MODEL, SLEEP, Request, Steps, chat_kwargs, is_awaitable

if TYPE_CHECKING:
    from agent_fsm.engine.context import RunContext
    from agent_fsm.engine.events import RunEvent

__all__ = ["adrive"]

T = TypeVar("T")


async def _finish(task: asyncio.Future[Any]) -> tuple[Any, asyncio.CancelledError | None]:
    """Await ``task`` to its end even if this task is cancelled meanwhile; the result and any cancellation seen."""
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            return await asyncio.shield(task), cancelled
        except asyncio.CancelledError as exc:
            if task.done():  # the work itself was cancelled, not only this task
                raise
            cancelled = exc


async def _aperform(request: Request, deliver: Any) -> tuple[Any, asyncio.CancelledError | None]:
    kind = request[0]
    if kind == CALL:
        function, args, kwargs, _what, shielded, in_thread = request[1:]
        if in_thread:
            work: Awaitable[Any] = asyncio.to_thread(function, *args, **kwargs)
        else:
            work = function(*args, **kwargs)
            if not is_awaitable(work):
                return work, None
        if shielded:
            return await _finish(asyncio.ensure_future(work))
        return await work, None
    if kind == MODEL:
        return await _ask(request[1], deliver), None
    return await _finish(asyncio.ensure_future(asyncio.sleep(request[1])))


async def _ask(run: RunContext, deliver: Any) -> Any:
    model = run.model
    on_delta = run.adelta_sink(deliver) if run.outbox is not None else None
    extra = chat_kwargs(run, on_delta)
    achat = getattr(model, "achat", None)
    if achat is not None:
        reply: Any = achat(run.state.messages, run.declarations, **extra)
    elif getattr(model, "blocking", False):
        reply = asyncio.to_thread(model.chat, run.state.messages, run.declarations, **extra)
    else:
        reply = model.chat(run.state.messages, run.declarations, **extra)
    if not is_awaitable(reply):
        return reply
    remaining = run.remaining_seconds()
    if remaining is None:
        return await reply
    return await asyncio.wait_for(reply, max(remaining, 0.0))  # TimeoutError: the budget ran out mid-call


async def adrive(steps: Steps[T], outbox: list[RunEvent] | None = None, on_event: Any = None) -> T:
    """
    Perform ``steps`` asynchronously; each event posted to ``outbox`` goes to ``on_event`` (awaited if async).

    A cancellation arriving during a shielded request is raised into the
    steps at their next unshielded request (or when they end), never inside
    an effect.
    """
    deliver = _deliverer(on_event)
    send: Any = None
    error: BaseException | None = None
    deferred: asyncio.CancelledError | None = None
    while True:
        try:
            request = steps.send(send) if error is None else steps.throw(error)
        except StopIteration as done:
            if outbox:
                await _adrain(outbox, deliver)
            if deferred is not None:
                raise deferred from None
            return done.value  # type: ignore[no-any-return]
        if outbox:
            await _adrain(outbox, deliver)
        send = error = None
        if deferred is not None and not _shielded(request):
            error, deferred = deferred, None
            continue
        try:
            send, cancelled = await _aperform(request, deliver)
        except BaseException as exc:  # raised into the steps, where they asked
            error = exc
        else:
            deferred = deferred or cancelled


def _shielded(request: Request) -> bool:
    return request[0] == SLEEP or (request[0] == CALL and bool(request[5]))


def _deliverer(on_event: Any) -> Callable[[RunEvent], Awaitable[None]]:
    async def deliver(event: RunEvent) -> None:
        if on_event is not None and is_awaitable(outcome := on_event(event)):
            await outcome

    return deliver


async def _adrain(outbox: list[RunEvent], deliver: Callable[[RunEvent], Awaitable[None]]) -> None:
    events = outbox[:]
    outbox.clear()
    for event in events:
        await deliver(event)
