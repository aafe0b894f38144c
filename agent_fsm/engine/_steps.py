"""
Where a run waits on the world, and the two ways of waiting: one driver for sync and async.

The machine's effects are generators. At each point where a run needs
something from outside (the model's reply, a gate's verdict, a handler's
result, a pause between retries) an effect yields a request and receives
the answer, or has the exception raised into it at that very point. The
run's logic is written once; :func:`iterate` performs requests by plain
calls and :func:`agent_fsm.engine._async.adrive` awaits them, so the two drivers cannot disagree.

A request marked *shielded* (a handler's call, the pause before a retry)
is one that must finish once started: the async runner lets a
cancellation wait for it.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from agent_fsm.engine._errors import NotSynchronous

if TYPE_CHECKING:
    from agent_fsm.engine._events import RunEvent
    from agent_fsm.engine._run import RunContext

__all__ = [
    "DECLINED",
    "Handed",
    "Request",
    "Steps",
    "answered",
    "call_of",
    "drive",
    "together",
    "handler_call",
    "iterate",
    "model_call",
    "pause_for",
    "perform_now",
]


# --- steps ---

T = TypeVar("T")

Request = tuple[Any, ...]
"""``(kind, ...)``: what the run waits for (see :func:`call_of`, :func:`handler_call`, :func:`model_call`)."""

Steps = Generator[Request, Any, T]
"""A piece of a run's logic: yields requests, receives their answers, returns its value."""

CALL, MODEL, SLEEP, AWAIT, TOGETHER = 0, 1, 2, 3, 4


class Handed(tuple[Any, ...]):
    """
    A performer's answer that is no answer: the step yields the request to the driver instead.

    Empty (:data:`DECLINED`): yield the request just made. Otherwise the
    request to yield in its place: ``(AWAIT, awaitable, shielded)``, a call
    made in place whose result must be awaited.
    """


DECLINED = Handed()

Perform = Callable[[Request], Any]
"""
Performs a request in place (:func:`perform_now`); a step given ``None`` yields its requests to the driver.

A performer may hand a request back (a :class:`Handed` answer); the step then yields ``answer or request``.
"""


def call_of(what: str, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Request:
    """Ask for ``function(*args, **kwargs)``, e.g. a gate's verdict; ``what`` names its role if it turns out async."""
    return (CALL, function, args, kwargs, what, False, False)


def handler_call(function: Callable[..., Any], kwargs: Mapping[str, Any], blocking: bool) -> Request:
    """
    Ask for a handler's ``function(**kwargs)``: shielded, so a cancellation waits for it to finish.

    A ``blocking`` handler runs in a worker thread under the async driver.
    """
    return (CALL, function, (), kwargs, "handler", True, blocking)


def together(requests: list[Request]) -> Request:
    """
    Ask for several handler calls at once, run concurrently: shielded, so a cancellation waits for all of them.

    The answer is one ``(True, result)`` or ``(False, exception)`` per request,
    in their order: one branch raising never loses the others' results.
    """
    return (TOGETHER, requests)


def answered(outcome: tuple[bool, Any], perform: Perform | None) -> Perform:
    """
    A performer that answers the first handler request with ``outcome`` (a call started early), the rest as ``perform``.

    The outcome arrives where the handler's call would have: a result is
    returned, an exception raised, so the call is observed exactly as if it ran at its turn.
    """
    unused = [outcome]

    def answer(request: Request) -> Any:
        if unused and request[0] == CALL and request[4] == "handler":
            ok, value = unused.pop()
            if ok:
                return value
            raise value
        return DECLINED if perform is None else perform(request)

    return answer


def model_call(run: RunContext) -> Request:
    """Ask the run's model for its next reply to the run's transcript."""
    return (MODEL, run)


def pause_for(seconds: float, shielded: bool = True) -> Request:
    """
    Wait ``seconds``: inside an effect (a retry's back-off) shielded, so never cut short by a cancellation.

    Unshielded (a wait before a model call, for its rate limit), a cancellation ends the wait at once.
    """
    return (SLEEP, seconds, shielded)


def is_awaitable(value: Any) -> bool:
    return hasattr(value, "__await__")


def _refuse(value: Any, what: str, function: Any) -> NotSynchronous:
    close = getattr(value, "close", None)
    if callable(close):
        close()  # a coroutine never started: nothing ran, and no "never awaited" warning
    name = getattr(function, "__qualname__", None) or repr(function)
    return NotSynchronous(
        f"the {what} {name} is asynchronous (it returned {type(value).__name__}); run it with arun, aadvance or aresume"
    )


def chat_kwargs(run: RunContext, on_delta: Any) -> dict[str, Any]:
    """
    The keywords a model's ``chat`` is given besides the transcript and the tools.

    ``on_delta`` for a model that ``streams``; ``output`` (the run's
    :class:`~agent_fsm.engine._schema.OutputSpec`) for a model that
    ``takes_output``, so it can ask its provider for structured output natively;
    the output cap for a model that ``takes_output_cap`` (what a cost budget's worst case counts on).
    """
    cap = run.limits.max_output_tokens
    if on_delta is None and run.output is None and cap is None:
        return {}  # the common turn: nothing to ask of the model's optional keywords
    model = run.model
    extra = {"on_delta": on_delta} if on_delta is not None and getattr(model, "streams", False) else {}
    if run.output is not None and getattr(model, "takes_output", False):
        extra["output"] = run.output
    if cap is not None and getattr(model, "takes_output_cap", False):
        extra["max_output_tokens"] = cap
    return extra


def perform_now(request: Request, live: Callable[[RunEvent], Any] | None = None) -> Any:
    """
    Perform ``request`` at once, where the steps stand: how the sync driver serves a run nobody listens to.

    A step given this performs its requests in place instead of yielding
    them (see :data:`Perform`); answers and exceptions arrive exactly where
    a yield would have received them, without a trip through the driver.
    :func:`iterate` performs the requests it is yielded with it too,
    ``live`` receiving a streaming model's text deltas. (One function, not a
    wrapper around another: it runs for every gate, handler and model call.)
    """
    kind = request[0]
    if kind == CALL:
        result = request[1](*request[2], **request[3])
        if hasattr(result, "__await__"):
            raise _refuse(result, request[4], request[1])
        return result
    if kind == MODEL:
        run: RunContext = request[1]
        chat = getattr(run.model, "chat", None)
        if chat is None:
            raise NotSynchronous(f"the model {run.model!r} has no chat(); an async-only model runs with arun")
        on_delta = run.delta_sink(live) if run.outbox is not None else None
        result = chat(run.messages_to_send(), run.declarations, **chat_kwargs(run, on_delta))
        if hasattr(result, "__await__"):
            raise _refuse(result, "model", chat)
        return result
    if kind == TOGETHER:
        return _run_together(request[1])
    time.sleep(request[1])
    return None


def _outcome(request: Request) -> tuple[bool, Any]:
    try:
        return True, perform_now(request)
    except Exception as exc:  # the branch's failure, given back in its place
        return False, exc


def _run_together(requests: list[Request]) -> list[tuple[bool, Any]]:
    """The sync driver's :func:`together`: one worker thread per call (each in a copy of this context)."""
    from concurrent.futures import ThreadPoolExecutor  # only a run that opted in to parallel calls pays for it

    with ThreadPoolExecutor(max_workers=len(requests), thread_name_prefix="agent_fsm-call") as pool:
        futures = [pool.submit(contextvars.copy_context().run, _outcome, r) for r in requests]
        return [f.result() for f in futures]


_perform = perform_now


def iterate(steps: Steps[T], outbox: list[RunEvent] | None = None, live: Any = None) -> Generator[RunEvent, None, T]:
    """
    Perform ``steps`` synchronously, yielding the events they post to ``outbox`` as they happen.

    A request's exception is raised into the steps where they made it; a
    :class:`NotSynchronous` refusal is not (it is the caller's mistake) and
    ends them. ``live``, when given, receives a streaming model's text
    deltas during the call instead of after it.
    """
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = steps.send(send) if error is None else steps.throw(error)
        except StopIteration as done:
            if outbox:
                yield from _drain(outbox)
            return done.value  # type: ignore[no-any-return]
        if outbox:
            yield from _drain(outbox)
        send = error = None
        try:
            send = _perform(request, live)
        except NotSynchronous:
            steps.close()
            raise
        except BaseException as exc:  # raised into the steps, where they asked
            error = exc


def _drain(outbox: list[RunEvent]) -> Iterator[RunEvent]:
    events = outbox[:]
    outbox.clear()
    yield from events


def drive(steps: Steps[T], outbox: list[RunEvent] | None = None, on_event: Any = None) -> T:
    """Perform ``steps`` synchronously; each event posted to ``outbox`` goes to ``on_event``."""
    events = iterate(steps, outbox, on_event)
    if outbox is None:
        try:
            next(events)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        raise AssertionError("no outbox, so no event")  # pragma: no cover
    while True:
        try:
            event = next(events)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if is_awaitable(on_event(event)):
            raise NotSynchronous(f"on_event {on_event!r} is asynchronous; pass it to arun, aadvance or aresume")
