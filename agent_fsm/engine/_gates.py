"""
Gates and screens: the judges the engine consults, and their verdicts.

A gate is any callable from a validated :class:`ToolCall` to a
:class:`Verdict` (or a plain ``(allowed, reason)`` tuple). It decides whether
*this* call may run *now*; it never sees the model's prose, only the call.

A screen judges text instead of calls: the task before the first model
call (an input screen), every observation before the model reads it (a
result screen). Its verdicts and the guards and effects of the two
screening states of the run machine are in the second section.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, Union

import attrs

from agent_fsm.engine import _events as events
from agent_fsm.engine._endings import CODE_PATTERN, Ending
from agent_fsm.engine._errors import GateError, NotSynchronous, RunError, ScreenError
from agent_fsm.engine._messages import Observation, content_text, tool_message
from agent_fsm.engine._state import RunState, ScreenRecord
from agent_fsm.engine._steps import Handed, Steps, call_of
from agent_fsm.engine._tools import Registry, ToolCall, measure

if TYPE_CHECKING:
    from agent_fsm.engine._run import RunContext

__all__ = [
    "Gate",
    "InputScreen",
    "Redact",
    "ResultScreen",
    "ScreenVerdict",
    "Verdict",
    "allow_all",
    "as_verdict",
    "ask_for_effects",
    "deny_effects",
    "result_unscreened",
    "screen_observation",
    "screen_stopped",
    "screen_task",
    "task_of",
    "task_refused",
    "task_unscreened",
]


# --- gates ---

VerdictKind = Literal["allow", "deny", "ask"]


@attrs.frozen
class Verdict:
    """
    A gate's decision: ``allow``, ``deny`` (the reason goes back to the model),
    or ``ask`` (the run pauses in ``awaiting_approval`` until a human decides).
    """

    kind: VerdictKind = attrs.field(validator=attrs.validators.in_(("allow", "deny", "ask")))
    reason: str = attrs.field(default="", validator=attrs.validators.instance_of(str))

    @classmethod
    def allow(cls, reason: str = "allowed") -> Verdict:
        return cls("allow", reason)

    @classmethod
    def deny(cls, reason: str) -> Verdict:
        return cls("deny", reason)

    @classmethod
    def ask(cls, reason: str) -> Verdict:
        return cls("ask", reason)


Gate = Callable[[ToolCall], Union[Verdict, "tuple[bool, str]"]]
"""A gate: a validated call in, a :class:`Verdict` (or ``(allowed, reason)``) out, consulted just before the effect."""


def as_verdict(decision: object) -> Verdict:
    """
    Read a gate's return value as a Verdict.

    Raises:
        GateError: it is neither a Verdict nor an ``(allowed: bool, reason: str)`` tuple.
            A gate that answers something else is a bug; guessing would be unsafe.
    """
    if isinstance(decision, Verdict):
        # attrs validators run at construction only; a Verdict built around them is still checked here
        if decision.kind not in ("allow", "deny", "ask") or not isinstance(decision.reason, str):
            raise GateError(
                f"a Verdict needs a kind of allow, deny or ask and a reason string; got {decision!r}"
                f" (reason is a {type(decision.reason).__name__})"
            )
        return decision
    if (
        isinstance(decision, tuple)
        and len(decision) == 2
        and isinstance(decision[0], bool)
        and isinstance(decision[1], str)
    ):
        return Verdict("allow" if decision[0] else "deny", decision[1])
    raise GateError(f"a gate must return a Verdict or (bool, str); got {decision!r}")


def allow_all(call: ToolCall) -> Verdict:
    """Let every call through: having no policy, stated openly."""
    return Verdict.allow("no policy configured")


NO_GATE_REASON = "no gate authorised effects: {name} changes the world and this run has no gate allowing it"


def deny_effects(tools: Registry) -> Gate:
    """
    The secure default used when ``gate=None``: reads run, effectful tools are refused.
    """

    def gate(call: ToolCall) -> Verdict:
        if tools[call.name].effectful:
            return Verdict.deny(NO_GATE_REASON.format(name=call.name))
        return Verdict.allow("effect-free tool")

    return gate


def ask_for_effects(tools: Registry, reason: str = "needs a human's approval") -> Gate:
    """Reads run; every effectful call pauses the run for a human's approval."""

    def gate(call: ToolCall) -> Verdict:
        if tools[call.name].effectful:
            return Verdict.ask(f"{call.name} {reason}")
        return Verdict.allow("effect-free tool")

    return gate


# --- screens ---
#
# Screens: what the model reads, judged before it reads it, as states of the run machine.
#
# An *input screen* reads the task in ``ScreeningInput``, before the first
# model call, and may refuse it (the run ends ``refused`` with the screen's
# code; no model call is made). A *result screen* reads every observation in
# ``ScreeningResult``, after it is recorded and before the model is asked
# again, and may pass it, redact it (the model is shown the redacted content;
# ``RunState.observations`` keeps the raw one) or stop the run (it ends
# ``intercepted``; the model is shown a withheld note, never the content).
#
# A screen is a plain or ``async def`` function, like a gate, returning
#
# * ``None``: pass;
# * an :class:`agent_fsm.Ending`: stop with that code and reason, or, with
#   ``accept=True``, pass and record the code (a flag);
# * a :class:`Redact` (result screens only): show its content instead.
#
# Anything else, or an exception, is a bug in the screen: :class:`agent_fsm.ScreenError`
# with the run's state, and the run rests in the screening state, so
# :func:`agent_fsm.advance` screens again once the screen is fixed. Every
# verdict is recorded in ``RunState.screens`` (so a store keeps it) and posted
# as a :class:`agent_fsm.Screened` event.
#
# Rationale: a screen is a state, not a hook beside the machine, so the
# diagrams show where it runs, the static checker proves the run still ends
# (screening the task spends the one-off ``task_screen`` budget; screening an
# observation sits on the edges the ``pending_calls`` and ``turns`` budgets
# already bound), and a run with no screen takes none of these edges: its cost
# is one guard that reads an attribute.


def _code(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or CODE_PATTERN.fullmatch(value) is None:
        raise ValueError(f"a screen's code must be a lowercase identifier like 'injection'; got {value!r}")


def _json_content(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"redacted content must be plain JSON data (it is saved and shown): {exc}") from None


@attrs.frozen
class Redact:
    """
    A result screen's verdict: show the model ``content`` in place of the observation's content.

    The raw observation stays in ``RunState.observations``; ``code`` and
    ``reason`` are recorded with the verdict (``RunState.screens``).

    Raises:
        ValueError: ``content`` is not plain JSON data, or ``code`` is not a lowercase identifier.
    """

    content: Any = attrs.field(validator=_json_content)
    code: str = attrs.field(default="redacted", validator=_code)
    reason: str = attrs.field(default="", converter=str)


ScreenVerdict = Ending | Redact | None
"""A screen's answer: ``None`` passes, an :class:`Ending` stops (``accept=True``: flags), a :class:`Redact` redacts."""

InputScreen = Callable[[str, RunState], "ScreenVerdict | Awaitable[ScreenVerdict]"]
"""Reads the task (the newest user message's text) and the run's state before the first model call."""

ResultScreen = Callable[[Observation, RunState], "ScreenVerdict | Awaitable[ScreenVerdict]"]
"""Reads each observation (raw) and the run's state before the model does."""


def task_of(state: RunState) -> str:
    """
    The task the run was given: the text of the newest message it opened with (``""`` if none is text).

    A task with images or files reads as its text with each one's placeholder
    (type and size), so a screen knows they are there without seeing the bytes.
    """
    if not state.opening:
        return ""
    content = state.messages[state.opening - 1].get("content")
    if type(content) is list:
        return content_text(content)
    return content if isinstance(content, str) else ""


def _read(verdict: Any, stage: str, state: RunState) -> tuple[str, str | None, str, Any]:
    """``(action, code, reason, content)`` of a screen's verdict; anything that is not one is a :class:`ScreenError`."""
    if verdict is None:
        return "pass", None, "", None
    if isinstance(verdict, Ending):
        return ("pass" if verdict.accept else "stop"), verdict.code, verdict.reason, None
    if isinstance(verdict, Redact):
        if stage == "input":
            raise ScreenError(
                "an input screen passes the task (None) or refuses it (an Ending); it cannot redact it", state=state
            )
        return "redact", verdict.code, verdict.reason, verdict.content
    raise ScreenError(f"the {stage} screen must return None, an Ending or a Redact; got {verdict!r:.200}", state=state)


def _ask(run: RunContext, what: str, screen: Any, subject: Any) -> Steps[Any]:
    """The screen's verdict on ``subject`` (awaited under the async driver); a screen that raises is a bug."""
    state = run.state
    try:
        request = call_of(what, screen, subject, state)
        verdict = run.perform(request) if run.perform is not None else (yield request)
        if type(verdict) is Handed:  # the performer left it to the driver
            verdict = yield verdict or request
        return verdict
    except NotSynchronous:
        raise  # an async screen under the sync driver: the caller's mistake, not the screen's
    except RunError:
        raise
    except Exception as exc:
        raise ScreenError(f"the {what} raised {type(exc).__name__}: {exc}", state=state) from exc


def _record(run: RunContext, record: ScreenRecord) -> None:
    run.state.screens.append(record)
    if run.outbox is not None:
        r = record
        run.post(events.Screened(run.run_id, time.time(), r.stage, r.call_id, r.action, r.code, r.reason))


# --- guards ---


def task_unscreened(run: RunContext) -> bool:
    """An input screen is set and the task was not screened yet (nothing happens before it: no model call)."""
    return run.screen_input is not None and run.state.turns == 0 and not run.state.screens


def task_refused(run: RunContext) -> bool:
    """The input screen refused the task."""
    screens = run.state.screens
    return bool(screens) and screens[-1].stage == "input" and screens[-1].action == "stop"


def result_unscreened(run: RunContext) -> bool:
    """A result screen is set: the observation just recorded goes through it before the model reads it."""
    return run.screen_result is not None


def screen_stopped(run: RunContext) -> bool:
    """The result screen stopped the run on the latest observation."""
    screens, observations = run.state.screens, run.state.observations
    if not screens or not observations:
        return False
    last = screens[-1]
    return last.stage == "result" and last.action == "stop" and last.call_id == observations[-1].call_id


# --- effects ---


def screen_task(run: RunContext) -> Steps[None]:
    """The input screen reads the task; a refusal records the screen's code as the run's."""
    state = run.state
    if state.screens and state.screens[-1].stage == "input":
        state.screens.pop()  # a run resumed in this state: screened again, recorded once
    screen = run.screen_input
    if screen is None:  # resumed here by an agent without an input screen: the task passes
        return
    verdict = yield from _ask(run, "input screen", screen, task_of(state))
    action, code, reason, _ = _read(verdict, "input", state)
    if action == "stop":
        state.code = code
    _record(run, ScreenRecord("input", None, action, code, reason))


def screen_observation(run: RunContext) -> Steps[None]:
    """
    The result screen reads the latest observation (raw); the tool message the model will read is rewritten
    for a redaction (the redacted content) or a stop (a note that it was withheld).
    """
    state = run.state
    observation = state.observations[-1]
    if state.screens and state.screens[-1].stage == "result" and state.screens[-1].call_id == observation.call_id:
        state.screens.pop()  # a run resumed in this state: screened again, recorded once
    screen = run.screen_result
    if screen is None:
        return
    verdict = yield from _ask(run, "result screen", screen, observation)
    action, code, reason, content = _read(verdict, "result", state)
    if action == "redact":  # the redacted content is all the model reads: a result's images and files withheld
        _show(run, attrs.evolve(observation, content=content, media=()))
    elif action == "stop":
        state.code = code
        withheld = f"withheld by a result screen ({code})" + (f": {reason}" if reason else "")
        _show(run, Observation(observation.call_id, False, "denied", withheld))
    _record(run, ScreenRecord("result", observation.call_id, action, code, reason))


def _show(run: RunContext, shown: Observation) -> None:
    """Replace the tool message of ``shown``'s call (the newest one) with ``shown``, re-measured."""
    state = run.state
    messages = state.messages
    for index in range(len(messages) - 1, state.opening - 1, -1):
        message = messages[index]
        if message.get("role") == "tool" and message.get("tool_call_id") == shown.call_id:
            break
    else:  # pragma: no cover - the observation's message is appended with it
        raise RunError(f"no tool message answers {shown.call_id!r}", state=state)
    replacement = tool_message(shown)
    try:
        delta = measure(run.estimator, replacement) - measure(run.estimator, message)
    except RunError as exc:
        exc.state = state
        raise
    messages[index] = replacement
    state.message_tokens = max(0, state.message_tokens + delta)
