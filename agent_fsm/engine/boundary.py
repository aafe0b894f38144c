"""
The effect boundary: validation, then the gate, then the handler. Nothing else runs a tool.

The run machine walks these steps as separate states (Proposing judges,
Executing executes) so a pause for approval can fall between them; workflow
patterns that own their control flow call :func:`attempt` for all three.
Both go through the same two functions here, so there is one boundary.
"""

from __future__ import annotations

from typing import Any, Literal

from agent_fsm.engine.checkpoint import ToolContext, fingerprint
from agent_fsm.engine.errors import ToolError
from agent_fsm.engine.failures import GateError, HandlerError
from agent_fsm.engine.gates import Gate, as_verdict
from agent_fsm.engine.jsondata import storable
from agent_fsm.engine.limits import Limits
from agent_fsm.engine.observe import Observation, to_json_data
from agent_fsm.engine.state import Judgement, RunState
from agent_fsm.engine.steps import NotSynchronous, Perform, Steps, call_of, drive, handler_call
from agent_fsm.engine.tools import Registry, ToolCall, check_registry, validate_call

__all__ = ["EXPECTED_TOOL_ERRORS", "attempt", "attempting", "execute", "execution", "judge", "judging"]

EXPECTED_TOOL_ERRORS: tuple[type[BaseException], ...] = (ToolError, KeyError, ValueError, TimeoutError)
"""Handler exceptions that become ``error`` observations; any other one is a bug and propagates."""

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

    ``perform`` performs the request in place instead (see :func:`agent_fsm.engine.steps.perform_now`).
    """
    reason = validate_call(call, tools, limits=limits)
    if reason is not None:
        return Judgement("invalid", reason)
    request = call_of("gate", gate, call)
    try:
        verdict = as_verdict(perform(request) if perform is not None else (yield request))
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
    their text form marked ``text_form``: once the handler returned, the
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
) -> Steps[Observation]:
    """
    :func:`execute` as driver steps: the handler's call is a shielded request.

    An ``async`` handler is awaited, a ``blocking`` one runs in a thread
    under the async driver, and a cancellation waits for it to finish.
    ``perform`` performs the request in place instead.
    """
    spec = tools[call.name]
    handler = spec.handler
    arguments = spec.handler_arguments(call.arguments)  # type: ignore[arg-type]  # validated: a JSON object
    # ``context`` is the engine's argument, never the model's: a handler that
    # names it gets the call's ToolContext, replacing any argument the model
    # sent under that name, so the idempotency key cannot be forged.
    if spec.takes_context:
        given = context if context is not None else ToolContext("", call.call_id, fingerprint(call)[:32])
        arguments = {**arguments, "context": given}
    request = handler_call(handler, arguments, spec.blocking)
    try:
        result = perform(request) if perform is not None else (yield request)
    except NotSynchronous:
        raise  # an async handler under the sync driver: nothing ran
    except EXPECTED_TOOL_ERRORS as exc:
        permanent = isinstance(exc, ToolError) and exc.permanent
        return Observation(call.call_id, False, "error", _error_content(exc), permanent=permanent)
    except Exception as exc:
        raise HandlerError(
            f"handler of {call.name!r} raised {type(exc).__name__}: {exc} (a bug, not a tool failure;"
            f" raise agent_fsm.ToolError for failures the model should see)",
            state=state,
            call=call,
        ) from exc
    content, text_form = storable(result)
    return Observation(call.call_id, True, "result", content, text_form=text_form)


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
        return (yield from execution(call, tools))
    kind: Literal["invalid", "denied"] = "invalid" if judgement.kind == "invalid" else "denied"
    reason = judgement.reason if judgement.kind != "ask" else f"needs a human's approval: {judgement.reason}"
    return Observation(call.call_id, False, kind, reason)
