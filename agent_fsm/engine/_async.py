"""
The async way of waiting: a run's steps awaited, cancellation deferred; how ``Agent.arun`` and its twins run.

The only kernel module that imports ``asyncio``; loaded on first use, so a
synchronous program never pays for it.

The async runner of a run's steps (see :mod:`agent_fsm.engine._steps`): requests awaited, cancellation deferred.

Cancellation is deferred across *shielded* requests, the ones inside an
effect (a handler running, the pause before its retry): the effect
finishes and is recorded, and the cancellation is raised into the run at
its next unshielded request, where nothing is half done. Kept apart from
the sync runner so a synchronous program never imports ``asyncio``.


[async_driver]
How :meth:`agent_fsm.Agent.arun` and its twins perform a run's steps: awaited, cancellation deferred.

Same arguments, same results and the very same steps as the sync driver
(:mod:`agent_fsm.engine._agent`); only the waiting differs. A model's
``async def achat`` is preferred to its ``chat``; ``async`` gates,
handlers, answer checks and event sinks are awaited; a ``blocking`` tool
(or model) runs in a worker thread. Imported only when used, so a
synchronous program never loads ``asyncio``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from agent_fsm.engine._boundary import Checkpointer, Intent
from agent_fsm.engine._events import RunEvent
from agent_fsm.engine._launch import Launch, failed, interrupted, recovering
from agent_fsm.engine._state import RunResult, RunState
from agent_fsm.engine._steps import (
    AWAIT,
    CALL,
    DECLINED,
    MODEL,
    SLEEP,
    TOGETHER,
    Handed,
    Request,
    Steps,
    chat_kwargs,
    is_awaitable,
)

if TYPE_CHECKING:
    from agent_fsm.engine._agent import Agent
    from agent_fsm.engine._run import RunContext

__all__ = ["RunCancelled", "acontinue_run", "adrive", "performed", "streamed"]


# --- async_steps ---

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


async def _aperform(request: Request) -> tuple[Any, asyncio.CancelledError | None]:
    """The requests the driving loop leaves to a coroutine: a call in a worker thread, a pause."""
    if request[0] == CALL:
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
    if request[0] == TOGETHER:
        return await _finish(asyncio.ensure_future(_together(request[1])))
    if not request[2]:  # a wait nothing depends on finishing (a rate limit's): a cancellation cuts it short
        await asyncio.sleep(request[1])
        return None, None
    return await _finish(asyncio.ensure_future(asyncio.sleep(request[1])))


async def _branch(request: Request) -> tuple[bool, Any]:
    """One call of a :func:`~agent_fsm.engine._steps.together` request: its result, or what it raised."""
    function, args, kwargs, _what, _shielded, in_thread = request[1:]
    try:
        result = await asyncio.to_thread(function, *args, **kwargs) if in_thread else function(*args, **kwargs)
        if is_awaitable(result):
            result = await result
    except Exception as exc:  # the branch's failure, given back in its place
        return False, exc
    return True, result


async def _together(requests: list[Request]) -> list[tuple[bool, Any]]:
    """The async driver's parallel calls: one task per call (a plain handler in a worker thread)."""
    return list(await asyncio.gather(*map(_branch, requests)))


def _model_reply(run: RunContext, deliver: Callable[[RunEvent], Awaitable[None]] | None) -> Any:
    """
    The model's reply, or the awaitable of it (bounded by the run's time budget): the driver awaits it.

    A plain function, not a coroutine: what it builds to ask (the transcript
    sent, the keywords) is not kept alive while the run waits for the reply.
    """
    model = run.model
    on_delta = None
    if run.outbox is not None:
        on_delta = run.adelta_sink(deliver if deliver is not None else _deliverer(None))
    extra = chat_kwargs(run, on_delta)
    achat = getattr(model, "achat", None)
    messages = run.messages_to_send()
    if achat is not None:
        reply: Any = achat(messages, run.declarations, **extra)
    elif getattr(model, "blocking", False):
        reply = asyncio.to_thread(model.chat, messages, run.declarations, **extra)
    else:
        reply = model.chat(messages, run.declarations, **extra)
    if not hasattr(reply, "__await__"):
        return reply
    remaining = run.remaining_seconds()
    if remaining is None:
        return reply
    return asyncio.wait_for(reply, max(remaining, 0.0))  # TimeoutError: the budget ran out mid-call


_DEFERRING: set[asyncio.Task[Any] | None] = set()
"""The tasks whose driver holds a deferred cancellation: their steps make no call in place."""


def _in_place(request: Request) -> Any:
    """
    The async driver's performer: a gate or a handler on the loop is called where the steps stand.

    A run nobody listens to posts no events between its requests, so a plain
    call need not travel up the steps to the driver and back. Handed to the
    driver instead: the model's reply, a pause, a ``blocking`` handler (a
    worker thread) and a result to await (``(AWAIT, awaitable, shielded)``).
    While a cancellation is deferred nothing is called in place, so it is
    raised into the run at the next unshielded request, before any call.
    (A module function, not an object per run: a thousand runs in flight hold nothing more for it.)
    """
    if request[0] != CALL or request[6] or (_DEFERRING and asyncio.current_task() in _DEFERRING):
        return DECLINED
    result = request[1](*request[2], **request[3])
    if hasattr(result, "__await__"):
        return Handed((AWAIT, result, request[5]))
    return result


async def adrive(steps: Steps[T], outbox: list[RunEvent] | None = None, on_event: Any = None) -> T:
    """
    Perform ``steps`` asynchronously; each event posted to ``outbox`` goes to ``on_event`` (awaited if async).

    A cancellation arriving during a shielded request is raised into the
    steps at their next unshielded request (or when they end), never inside
    an effect.
    """
    return await _driving(steps, outbox, on_event, None, _NO_FAILURES)  # type: ignore[no-any-return]


_NO_FAILURES: list[BaseException] = []  # never appended to: only a relay appends, to a list of its own


async def _driving(
    steps: Steps[Any],
    outbox: list[RunEvent] | None,
    on_event: Any,
    context: RunContext | None,
    failures: list[BaseException],
) -> Any:
    """:func:`adrive`; with ``context``, also what :func:`performed` makes of the run's end: one coroutine, not two."""
    deliver = _deliverer(on_event) if outbox is not None else None
    send: Any = None
    error: BaseException | None = None
    deferred: asyncio.CancelledError | None = None
    try:
        while True:
            try:
                request = steps.send(send) if error is None else steps.throw(error)
            except StopIteration as done:
                if outbox:
                    await _adrain(outbox, deliver)  # type: ignore[arg-type]  # made with the outbox
                if deferred is not None:
                    raise deferred from None
                if failures:  # a listener failed on a handler's progress: raised here, as any listener's failure is
                    raise failures[0] from None
                return done.value
            if outbox:
                await _adrain(outbox, deliver)  # type: ignore[arg-type]
            send = error = None
            if deferred is not None and not _shielded(request):
                if request[0] == AWAIT:
                    request[1].close()  # made before the cancellation was deferred: never awaited
                error, deferred = deferred, None
                _DEFERRING.discard(asyncio.current_task())
                continue
            # The requests of nearly every turn are served here, without a coroutine and a tuple per request:
            # the model's reply, a result to await (a call made in place), a call on the loop.
            kind = request[0]
            cancelled: asyncio.CancelledError | None = None
            try:
                if kind == MODEL:
                    send = _model_reply(request[1], deliver)
                    if hasattr(send, "__await__"):
                        send = await send
                elif kind == AWAIT:
                    if request[2]:  # shielded (a handler): finished even if this task is cancelled meanwhile
                        send, cancelled = await _finish(asyncio.ensure_future(request[1]))
                    else:
                        send = await request[1]
                elif kind == CALL and not request[6]:
                    send = request[1](*request[2], **request[3])
                    if hasattr(send, "__await__"):
                        if request[5]:
                            send, cancelled = await _finish(asyncio.ensure_future(send))
                        else:
                            send = await send
                else:
                    send, cancelled = await _aperform(request)
            except BaseException as exc:  # raised into the steps, where they asked
                send, error = None, exc
            if cancelled is not None and deferred is None:
                deferred = cancelled
                _DEFERRING.add(asyncio.current_task())
    except BaseException as exc:
        if context is not None:
            _ended_by(context, exc)
        raise
    finally:
        if deferred is not None:
            _DEFERRING.discard(asyncio.current_task())


def _shielded(request: Request) -> bool:
    kind = request[0]
    if kind == SLEEP:
        return bool(request[2])
    return kind == TOGETHER or (kind == CALL and bool(request[5])) or (kind == AWAIT and bool(request[2]))


def _deliverer(on_event: Any) -> Callable[[RunEvent], Awaitable[None]]:
    async def deliver(event: RunEvent) -> None:
        if on_event is not None and is_awaitable(outcome := on_event(event)):
            await outcome

    return deliver


async def _adrain(outbox: list[RunEvent], deliver: Callable[[RunEvent], Awaitable[None]]) -> None:
    # One at a time from the front: a handler's worker thread may append meanwhile (a tool's progress).
    while outbox:
        await deliver(outbox.pop(0))


# --- async_driver ---


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


def performed(launch: Launch, on_event: Callable[[RunEvent], Any] | None) -> Coroutine[Any, Any, RunResult]:
    """Await ``launch``'s steps to the run's rest; a cancellation becomes :class:`RunCancelled` with the state."""
    context, steps = launch
    failures: list[BaseException] = _NO_FAILURES
    if context.outbox is not None:
        failures = []
        context.relay = _relay(context.outbox, on_event, failures)
    else:  # nobody hears events between requests: calls on the loop are made where they are asked
        context.perform = _in_place
    return _driving(steps, context.outbox, on_event, context, failures)


def _ended_by(context: RunContext, exc: BaseException) -> None:
    """
    What ``exc``, ending the run's steps, leaves of the run: raises :class:`RunCancelled` for a cancellation.

    Otherwise the clock is settled and the state attached; the caller raises ``exc`` on.
    """
    if isinstance(exc, RunCancelled):
        return
    if isinstance(exc, asyncio.CancelledError):
        interrupted(context)
        raise RunCancelled(
            f"the run was cancelled in {context.state.machine_state!r}; continue it with aadvance", state=context.state
        ) from exc
    context.settle_clock()
    if getattr(exc, "state", False) is None:
        exc.state = context.state  # type: ignore[attr-defined]  # a RunError raised before it knew the run
    failed(context, exc)


def _relay(
    outbox: list[RunEvent], on_event: Callable[[RunEvent], Any] | None, failures: list[BaseException]
) -> Callable[[RunEvent], None]:
    """
    Deliver an event as soon as this loop is free, from whatever thread reports it (a ``blocking`` handler's worker).

    The event joins the outbox, so the driver delivers it after the call if
    the loop was busy all along (a plain handler running on it), in order
    with the rest; meanwhile a delivery is scheduled on the loop. What the
    listener raises there is kept in ``failures``.
    """
    loop = asyncio.get_running_loop()
    deliver = _deliverer(on_event)

    async def flushed() -> None:
        try:
            await _adrain(outbox, deliver)
        except Exception as exc:
            failures.append(exc)

    def flush() -> None:
        task = asyncio.ensure_future(flushed())
        _DELIVERIES.add(task)  # held until done: the loop keeps only a weak reference to a task
        task.add_done_callback(_DELIVERIES.discard)

    def relay(event: RunEvent) -> None:
        outbox.append(event)
        loop.call_soon_threadsafe(flush)

    return relay


_DELIVERIES: set[asyncio.Future[None]] = set()


async def acontinue_run(
    agent: Agent, state: RunState, *, store: Checkpointer, run_id: str, intent: Intent | None
) -> RunResult:
    """
    :func:`agent_fsm.engine.continue_run`, awaited: for a driver whose gates, models or handlers must be awaited.

    A durable executor that settled an interrupted nested call itself (a
    Temporal workflow) continues the run here, so each run above it pauses
    on it by the recovery rules, judged by its own (awaited) gate.
    """
    return await performed(recovering(agent, state, store=store, run_id=run_id, intent=intent), None)


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
