"""
The effect boundary: validation, then the gate, then the handler; approvals; intents and checkpoints.

Nothing else runs a tool. The sections below, in order: tying an effect log
to its calls, what a run tells a store, the boundary itself, one call under
a checkpointer, and what a human approval covers.

Tying the environment's effect log to the calls that caused it.

A handler that logs its effect can name the call it serves with
:func:`current_call_id` (the ``call_id`` field convention); :func:`check_run`
then matches the log entry to that call even when the handler returns
something else than what it logged.


[checkpoint]
Durable runs, the kernel's side: what a run tells a store, and when.

The kernel knows no database. It calls a :class:`Checkpointer` at three
moments: when a run begins, before an effectful handler runs (an
:class:`Intent`: which call, with which arguments, under which idempotency
key) and after it (the observation is then in the state), and whenever the
run rests. A store (:mod:`agent_fsm.store`) commits each call before
returning, so after a crash the last commit says exactly which effect may
have happened without being observed.


[boundary]
The effect boundary: validation, then the gate, then the handler. Nothing else runs a tool.

The run machine walks these steps as separate states (Proposing judges,
Executing executes) so a pause for approval can fall between them; workflow
patterns that own their control flow call :func:`attempt` for all three.
Both go through the same two functions here, so there is one boundary.


[durable]
One call across the effect boundary under a checkpointer: intent first, then the handler, retries for idempotent tools.

:func:`agent_fsm.engine._run.execute_call` is the only caller. The
order is the guarantee: the intent of an effectful call is committed before
its handler starts, so a crash can never leave an effect with no record.


[approval]
Human approval: what a pause asks about, and what an approval covers.

An approval is never read from saved data as authority. A pause records the
fingerprint of the exact call the gate asked about; on resume the call is
validated against the current registry and the gate is consulted again, and
the human's "yes" turns only a fresh ``ask`` about that same fingerprint into
permission. A ``deny`` still denies, a broken contract is still ``invalid``.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Literal, Protocol

import attrs

from agent_fsm.engine._errors import ApprovalNeeded, GateError, HandlerError, NotSynchronous, OutcomeUnknown, ToolError
from agent_fsm.engine._gates import Gate, as_verdict
from agent_fsm.engine._json import storable
from agent_fsm.engine._limits import Limits
from agent_fsm.engine._messages import Observation, split_media, to_json_data
from agent_fsm.engine._state import Judgement, Pause, RunState
from agent_fsm.engine._steps import (
    DECLINED,
    Handed,
    Perform,
    Request,
    Steps,
    call_of,
    drive,
    handler_call,
    pause_for,
)
from agent_fsm.engine._tools import (
    OpenQuestion,
    Registry,
    ToolCall,
    ToolSpec,
    call_fingerprint,
    check_registry,
    validate_call,
)

__all__ = [
    "OUTCOME_UNKNOWN",
    "Checkpointer",
    "EXPECTED_TOOL_ERRORS",
    "EffectMatch",
    "Intent",
    "Seen",
    "ToolContext",
    "approved_judgement",
    "approved_judging",
    "attempt",
    "attempting",
    "call_context",
    "commit_intent",
    "commit_observation",
    "current_call_id",
    "early_request",
    "enter_call",
    "execute",
    "executing",
    "execution",
    "idempotency_key",
    "open_question",
    "judge",
    "judging",
    "leave_call",
    "MAX_PROGRESS_MESSAGE",
    "ProgressSink",
    "hear_progress",
    "report_progress",
    "unhear_progress",
    "mark_pause",
    "matches_call",
    "open_pause",
    "run_call",
]


# --- effects ---

EffectMatch = Callable[[Any, Observation], bool]
"""``match(effect, observation)``: does this effect-log entry come from the executed call observed here?"""

_CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("agent_fsm_current_call", default=None)


def current_call_id() -> str | None:
    """
    The id of the call whose handler is running now (``None`` outside a handler).

    Write it into the effect log as ``{"call_id": current_call_id(), ...}`` so
    each entry names the call that caused it.
    """
    return _CURRENT.get()


def enter_call(call_id: str) -> contextvars.Token[str | None]:
    """Make ``call_id`` the current call until :func:`leave_call` (the driver's cheap form of :func:`executing`)."""
    return _CURRENT.set(call_id)


def leave_call(token: contextvars.Token[str | None]) -> None:
    """Restore the current call :func:`enter_call` replaced."""
    _CURRENT.reset(token)


@contextlib.contextmanager
def executing(call_id: str) -> Iterator[None]:
    """Make ``call_id`` the current call for the duration of one handler."""
    token = _CURRENT.set(call_id)
    try:
        yield
    finally:
        _CURRENT.reset(token)


# --- progress ---

ProgressSink = Callable[[float, float | None, str | None], None]
"""What the run hears a handler's progress through: ``sink(progress, total, message)``, already checked."""

MAX_PROGRESS_MESSAGE = 1000
"""The longest progress message kept (characters); a longer one is cut, with ``…`` at its end."""

_PROGRESS: contextvars.ContextVar[ProgressSink | None] = contextvars.ContextVar("agent_fsm_progress", default=None)


def report_progress(progress: float, total: float | None = None, message: str | None = None) -> None:
    """
    Tell whoever listens to the run how far the running handler's call has come.

    The run posts a :class:`agent_fsm.ToolProgress` event for it (to
    ``on_event`` and ``astream`` during the call; to ``stream`` after it).
    Nothing happens when nobody listens, or outside a handler the engine
    runs. Call it from the handler's own code (its thread or task): a thread
    the handler starts itself does not carry the call with it. The same as
    :meth:`ToolContext.progress`.

    Raises:
        TypeError: ``progress`` or ``total`` is not a number, or ``message`` is not text.
        ValueError: ``progress`` or ``total`` is not finite (JSON could not carry the event).
    """
    done = _finite(progress, "progress")
    whole = None if total is None else _finite(total, "total")
    if message is not None:
        if not isinstance(message, str):
            raise TypeError(f"a progress message must be a str (got {type(message).__name__})")
        if len(message) > MAX_PROGRESS_MESSAGE:
            message = message[: MAX_PROGRESS_MESSAGE - 1] + "…"
    sink = _PROGRESS.get()
    if sink is not None:
        sink(done, whole, message)


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number (got {value!r} that is a {type(value).__name__})")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number (got {value!r})")
    return float(value)


def hear_progress(sink: ProgressSink) -> contextvars.Token[ProgressSink | None]:
    """Make ``sink`` hear :func:`report_progress` until :func:`unhear_progress` (around one handler's call)."""
    return _PROGRESS.set(sink)


def unhear_progress(token: contextvars.Token[ProgressSink | None]) -> None:
    """Restore what heard progress before :func:`hear_progress`."""
    _PROGRESS.reset(token)


def matches_call(effect: Any, observation: Observation) -> bool:
    """
    The default match: the entry equals the observed result, or names the call's id.

    ``observation`` is of a call that crossed the effect boundary (``result``
    or ``error``); a ``call_id`` field names it whatever the handler returned.
    """
    if isinstance(effect, Mapping) and "call_id" in effect:
        return bool(effect["call_id"] == observation.call_id)
    return observation.ok and bool(effect == observation.content)


# --- checkpoint ---


@attrs.frozen
class ToolContext:
    """
    What a handler that takes a ``context`` parameter is told about its call.

    ``idempotency_key`` is the same every time this very call is run again
    (a retry, a recovery after a crash, an approved "outcome unknown"), and
    differs for any other call: pass it downstream (an ``Idempotency-Key``
    header, a unique column) and the effect happens at most once.
    ``approved`` is true when a person approved this very call (after the
    gate asked, or after the handler raised :class:`agent_fsm.ApprovalNeeded`).
    """

    run_id: str
    call_id: str
    idempotency_key: str
    approved: bool = False

    def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """
        Say how far this call has come: the run's listeners hear a :class:`agent_fsm.ToolProgress` event.

        See :func:`agent_fsm.report_progress` (nothing happens when nobody listens).
        """
        report_progress(progress, total, message)


@attrs.frozen
class Intent:
    """
    An effectful call about to cross the boundary, committed before its handler runs.

    ``path`` is empty for a call of the run itself; for a call of a run nested
    in it (an agent run as a tool), the ids of the calls that ran each nested
    run, outermost first, joined by ``/``.
    """

    call_id: str
    tool: str
    fingerprint: str
    idempotency_key: str
    path: str = ""


class Checkpointer(Protocol):
    """
    Where a run's state is committed; :class:`agent_fsm.store.RunStore` is the full store.

    Each method returns only once the state is durable: the engine runs no
    handler after :meth:`save` with an intent until that intent is committed.
    """

    def begin(self, run_id: str, state: RunState) -> None:
        """Record a new run; refuse a ``run_id`` already used."""

    def save(self, run_id: str, state: RunState, intent: Intent | None = None) -> None:
        """Commit ``state``; ``intent`` is the effect about to run (``None``: none in flight)."""


def idempotency_key(run_id: str, state: RunState, call: ToolCall, ahead: int = 0) -> str:
    """
    The key of ``call`` at the head of ``state.pending``: stable across retries, crashes and approvals.

    It is derived from the run (its id and its nonce, random and fixed when
    the run began: the same id in another database or reused is another
    run), the call's place in the run (how many observations precede it: a
    model may reuse call ids across turns) and its fingerprint, so nothing
    needs to be stored to find it again. A state saved before runs had a
    nonce keys its calls as it did then. ``ahead``: the call is that many
    places behind the head (a parallel call started early).
    """
    text = f"{run_id}\x00{len(state.observations) + ahead}\x00{call_fingerprint(call)}"
    if state.nonce:
        text = f"{state.nonce}\x00{text}"
    import hashlib  # pauses and intents only: a plain run never keys a call

    return hashlib.sha256(text.encode()).hexdigest()[:32]


def open_question(spec: ToolSpec | None, run_id: str, state: RunState, call: ToolCall) -> OpenQuestion | None:
    """The question ``call`` (at the head of ``state.pending``) is asking a person now, in this process, if any."""
    asking = getattr(spec.handler, "asking", None) if spec is not None else None
    found = asking(idempotency_key(run_id, state, call)) if callable(asking) else None
    return found if isinstance(found, OpenQuestion) else None


def mark_pause(state: RunState) -> None:
    """Give a run resting in ``AwaitingApproval`` its pause id (once): a decision names the pause it decides."""
    if state.machine_state == "AwaitingApproval" and state.pause_id is None:
        import uuid

        state.pause_id = uuid.uuid4().hex


# --- boundary ---

EXPECTED_TOOL_ERRORS: tuple[type[BaseException], ...] = (ToolError, KeyError, ValueError, TimeoutError)
"""Handler exceptions that become ``error`` observations; any other one is a bug and propagates."""

OUTCOME_UNKNOWN = "outcome unknown"
"""How the reason begins when an effectful call may or may not have taken effect (an interruption, a timeout)."""

_MAY_HAVE_HAPPENED = (OutcomeUnknown, TimeoutError)  # from an effectful handler: the effect may have happened

_VERDICT_TO_JUDGEMENT = {"allow": "allow", "deny": "denied", "ask": "ask"}


def judge(
    call: ToolCall, tools: Registry, gate: Gate, *, state: RunState | None = None, limits: Limits | None = None
) -> Judgement:
    """
    Decide about one proposal: ``invalid`` (contract broken), else the gate's verdict.

    The gate is consulted only for a well-formed call, immediately before it
    could run. ``state`` is attached to any :class:`GateError` raised;
    ``limits`` bound the arguments' depth and size (the defaults when ``None``).

    Raises:
        GateError: the gate raised, or returned something that is not a verdict.
    """
    return drive(judging(call, tools, gate, state=state, limits=limits))


def judging(
    call: ToolCall,
    tools: Registry,
    gate: Gate,
    *,
    state: RunState | None = None,
    limits: Limits | None = None,
    perform: Perform | None = None,
) -> Steps[Judgement]:
    """
    :func:`judge` as driver steps: the gate's verdict is a request, so an ``async`` gate is awaited.

    ``perform`` performs the request in place instead (see :func:`agent_fsm.engine._steps.perform_now`).
    """
    reason = validate_call(call, tools, limits=limits)
    if reason is not None:
        return Judgement("invalid", reason)
    request = call_of("gate", gate, call)
    try:
        decision = perform(request) if perform is not None else (yield request)
        if type(decision) is Handed:  # the performer left it to the driver
            decision = yield decision or request
        verdict = as_verdict(decision)
    except NotSynchronous:
        raise  # the caller's mistake (an async gate under the sync driver), not the gate's
    except GateError as exc:
        exc.state = state
        raise
    except Exception as exc:
        raise GateError(f"the gate raised {type(exc).__name__} on {call!r}: {exc}", state=state) from exc
    return Judgement(_VERDICT_TO_JUDGEMENT[verdict.kind], verdict.reason)


def _error_content(exc: BaseException) -> Any:
    if isinstance(exc, ToolError):
        return exc.message if exc.data is None else to_json_data(exc.data)
    if len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]  # str(KeyError) would add quotes
    return str(exc) or type(exc).__name__


def execute(
    call: ToolCall, tools: Registry, *, state: RunState | None = None, context: ToolContext | None = None
) -> Observation:
    """
    Run a validated, allowed call's handler and observe what happened.

    Expected failures (:data:`EXPECTED_TOOL_ERRORS`) become ``error``
    observations (marked ``permanent`` when a :class:`ToolError` says so);
    results are stored as JSON data, or, when JSON cannot hold them, as
    their text form marked ``text_form`` (an :class:`Image` or :class:`File` in a result
    rides in ``media``, its placeholder in the content): once the handler returned, the
    effect happened, and nothing after it may raise and lose that record.
    The handler gets the arguments its signature takes; a handler with a
    ``context`` parameter receives ``context`` (a run's own, or one for this
    call alone).

    Raises:
        HandlerError: the handler raised anything else (a bug); ``state`` is attached.
    """
    return drive(execution(call, tools, state=state, context=context))


def execution(
    call: ToolCall,
    tools: Registry,
    *,
    state: RunState | None = None,
    context: ToolContext | None = None,
    perform: Perform | None = None,
    unknown_raises: bool = False,
) -> Steps[Observation]:
    """
    :func:`execute` as driver steps: the handler's call is a shielded request.

    An ``async`` handler is awaited, a ``blocking`` one runs in a thread
    under the async driver, and a cancellation waits for it to finish.
    ``perform`` performs the request in place instead. An effectful handler
    that raises :class:`OutcomeUnknown` or ``TimeoutError`` may have taken
    effect: that is an ``error`` observation saying so, or, with
    ``unknown_raises``, an :class:`OutcomeUnknown` for the run machine to
    put before a person.
    """
    spec = tools[call.name]
    handler = spec.handler
    arguments = spec.handler_arguments(call.arguments)  # type: ignore[arg-type]  # validated: a JSON object
    # ``context`` is the engine's argument, never the model's: a handler that
    # names it gets the call's ToolContext, replacing any argument the model
    # sent under that name, so the idempotency key cannot be forged.
    if spec.takes_context:
        given = context if context is not None else ToolContext("", call.call_id, call_fingerprint(call)[:32])
        arguments = {**arguments, "context": given}
    request = handler_call(handler, arguments, spec.blocking)
    try:
        result = perform(request) if perform is not None else (yield request)
        if type(result) is Handed:
            result = yield result or request
    except NotSynchronous:
        raise  # an async handler under the sync driver: nothing ran
    except ApprovalNeeded as exc:  # a tool asking for a person first: its reason is read as a gate's is
        if not isinstance(exc.reason, str):
            raise HandlerError(
                f"handler of {call.name!r} raised ApprovalNeeded with a {type(exc.reason).__name__} for its"
                " reason; the reason a person reads must be a str",
                state=state,
                call=call,
            ) from exc
        raise
    except EXPECTED_TOOL_ERRORS as exc:
        if spec.effectful and isinstance(exc, _MAY_HAVE_HAPPENED):
            why = f"{call.name} ({call.call_id}) raised {type(exc).__name__}: {_error_content(exc)}"
            if unknown_raises:
                raise OutcomeUnknown(why) from exc
            return Observation(call.call_id, False, "error", f"{OUTCOME_UNKNOWN}: {why}")
        permanent = isinstance(exc, ToolError) and exc.permanent
        return Observation(call.call_id, False, "error", _error_content(exc), permanent=permanent)
    except Exception as exc:
        raise HandlerError(
            f"handler of {call.name!r} raised {type(exc).__name__}: {exc} (a bug, not a tool failure;"
            f" raise agent_fsm.ToolError for failures the model should see)",
            state=state,
            call=call,
        ) from exc
    result, media = split_media(result)  # images and files travel beside the content, as their placeholders in it
    content, text_form = storable(result)
    return Observation(call.call_id, True, "result", content, text_form=text_form, media=media)


def attempt(call: ToolCall, tools: Registry, gate: Gate) -> Observation:
    """
    Take a proposal through judging and, when it is allowed, execution; otherwise refuse it.

    A verdict of ``ask`` is refused here (``denied``, with the gate's reason):
    code that calls this directly has no pause to offer a human.

    Raises:
        TypeError: ``tools`` is not a mapping of names to ToolSpecs (see :func:`check_registry`).
    """
    return drive(attempting(call, tools, gate))


def attempting(call: ToolCall, tools: Registry, gate: Gate) -> Steps[Observation]:
    """:func:`attempt` as driver steps: an ``async`` gate or handler is awaited under the async runner."""
    check_registry(tools)
    judgement = yield from judging(call, tools, gate)
    if judgement.kind == "allow":
        try:
            return (yield from execution(call, tools))
        except ApprovalNeeded as exc:  # no pause to offer here either
            judgement = Judgement("ask", exc.reason)
    kind: Literal["invalid", "denied"] = "invalid" if judgement.kind == "invalid" else "denied"
    reason = judgement.reason if judgement.kind != "ask" else f"needs a human's approval: {judgement.reason}"
    return Observation(call.call_id, False, kind, reason)


# --- durable ---


def commit_intent(
    checkpointer: Checkpointer | None, run_id: str, state: RunState, call: ToolCall, tools: Registry
) -> Intent | None:
    """Commit the intent of ``call`` if it is effectful and the run is stored; the intent, or ``None``."""
    if checkpointer is None or not tools[call.name].effectful:
        return None
    intent = Intent(call.call_id, call.name, call_fingerprint(call), idempotency_key(run_id, state, call))
    checkpointer.save(run_id, state, intent)
    return intent


def commit_observation(checkpointer: Checkpointer | None, run_id: str, state: RunState, intent: Intent | None) -> None:
    """Commit the state holding the observation of the call whose intent was committed."""
    if checkpointer is not None and intent is not None:
        checkpointer.save(run_id, state)


def call_context(
    takes_context: bool, run_id: str, state: RunState, call: ToolCall, approved: bool, ahead: int = 0
) -> ToolContext | None:
    """The context a handler that asks for one is given (the key costs a digest: made only then)."""
    if not takes_context:
        return None
    return ToolContext(run_id, call.call_id, idempotency_key(run_id, state, call, ahead), approved)


def early_request(call: ToolCall, tools: Registry, context: ToolContext | None, sink: ProgressSink | None) -> Request:
    """
    The handler request of ``call`` started before its turn (see :func:`agent_fsm.engine._steps.together`).

    The handler is called with the same arguments as at its turn, the call
    made current (and its progress heard) in whatever thread or task runs it;
    a plain handler runs in a worker thread under the async driver, so the calls overlap.
    """
    steps = execution(call, tools, context=context, unknown_raises=True)
    request = next(steps)  # the handler's call: nothing before it waits on the world
    steps.close()
    function = request[1]
    return handler_call(_in_call(function, call.call_id, sink), request[3], not inspect.iscoroutinefunction(function))


def _in_call(function: Callable[..., Any], call_id: str, sink: ProgressSink | None) -> Callable[..., Any]:
    def called(**kwargs: Any) -> Any:
        with _current(call_id, sink):
            result = function(**kwargs)
        return _awaited(result, call_id, sink) if hasattr(result, "__await__") else result

    return called


async def _awaited(result: Awaitable[Any], call_id: str, sink: ProgressSink | None) -> Any:
    with _current(call_id, sink):
        return await result


@contextlib.contextmanager
def _current(call_id: str, sink: ProgressSink | None) -> Iterator[None]:
    token = enter_call(call_id)
    heard = None if sink is None else hear_progress(sink)
    try:
        yield
    finally:
        if heard is not None:
            unhear_progress(heard)
        leave_call(token)


def run_call(
    call: ToolCall,
    tools: Registry,
    state: RunState,
    run_id: str,
    limits: Limits,
    perform: Perform | None = None,
    approved: bool = False,
) -> Steps[Observation]:
    """
    Run the head call (counting each attempt in ``state.tool_attempts``) and return its observation.

    An idempotent tool with ``retries`` is run again, under the same
    idempotency key, after an ``error`` that is not permanent or an
    outcome it could not know, with a doubling back-off, while
    ``limits.max_tool_calls`` admits another attempt: every failure spends
    the budget like any attempt. ``perform`` performs the requests in place
    (see :func:`agent_fsm.engine._steps.perform_now`). ``approved``: a person approved this call.

    Raises:
        OutcomeUnknown: the effectful call's last attempt may or may not have taken effect.
        ApprovalNeeded: the handler asks a person before its effect (never retried).
    """
    spec = tools[call.name]
    context = call_context(spec.takes_context, run_id, state, call, approved)
    retries = spec.retries if spec.idempotent else 0
    attempt = 0
    while True:
        state.tool_attempts += 1  # counted when issued, so failed attempts spend the budget too
        unknown: OutcomeUnknown | None = None
        try:
            observation = yield from execution(
                call, tools, state=state, context=context, perform=perform, unknown_raises=True
            )
            if observation.ok or observation.permanent:
                return observation
        except OutcomeUnknown as exc:
            unknown = exc
        except ApprovalNeeded:
            # Nothing is observed yet: the attempt that counts is the one made once a person decides (a call
            # that asked mid-call goes on then), so each attempt still leaves one observation.
            state.tool_attempts -= 1
            raise
        if attempt >= retries or (limits.max_tool_calls is not None and state.tool_attempts >= limits.max_tool_calls):
            if unknown is not None:
                raise unknown
            return observation
        request = pause_for(spec.backoff * 2**attempt)
        handed = DECLINED if perform is None else perform(request)
        if type(handed) is Handed:
            yield handed or request
        attempt += 1


# --- approval ---

Seen = Callable[[str], bool]
"""
``seen(pause_id)``: ``True`` if this pause was already decided (resume then
refuses), ``False`` after recording it as decided now. Record and answer in
one atomic step (a set under a lock, a unique key in a database).
"""


def open_pause(state: RunState, call: ToolCall, reason: str) -> Pause:
    """The pause for ``call``: an id unique to this run and ordinal, bound to the call's fingerprint."""
    ordinal = state.path.count("AwaitingApproval") + 1
    return Pause(f"{state.run_id}.{ordinal}", call_fingerprint(call), reason)


def approved_judgement(
    call: ToolCall, tools: Registry, gate: Gate, covers: str | None, *, state: RunState | None = None
) -> Judgement:
    """Judge ``call`` afresh under a human's approval of ``covers`` (see :func:`approved_judging`)."""
    return drive(approved_judging(call, tools, gate, covers, state=state))


def approved_judging(
    call: ToolCall, tools: Registry, gate: Gate, covers: str | None, *, state: RunState | None = None
) -> Steps[Judgement]:
    """
    Judge ``call`` afresh, as if newly proposed, with a human's approval of the fingerprint ``covers``.

    The approval turns an ``ask`` into ``allow`` only when ``call`` is the
    call approved; a changed call (edited state) asked about again is
    refused, since nobody approved it.
    """
    judgement = yield from judging(call, tools, gate, state=state)
    if judgement.kind != "ask":
        return judgement
    if covers is not None and call_fingerprint(call) == covers:
        return Judgement("allow", f"approved by a human reviewer ({judgement.reason})")
    return Judgement("denied", f"not run: the approval does not cover this call as it stands ({judgement.reason})")
