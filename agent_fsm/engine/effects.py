"""
Tying the environment's effect log to the calls that caused it.

A handler that logs its effect can name the call it serves with
:func:`current_call_id` (the ``call_id`` field convention); :func:`check_run`
then matches the log entry to that call even when the handler returns
something else than what it logged.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from agent_fsm.engine.observe import Observation

__all__ = ["EffectMatch", "current_call_id", "enter_call", "executing", "leave_call", "matches_call"]

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


def matches_call(effect: Any, observation: Observation) -> bool:
    """
    The default match: the entry equals the observed result, or names the call's id.

    ``observation`` is of a call that crossed the effect boundary (``result``
    or ``error``); a ``call_id`` field names it whatever the handler returned.
    """
    if isinstance(effect, Mapping) and "call_id" in effect:
        return bool(effect["call_id"] == observation.call_id)
    return observation.ok and bool(effect == observation.content)
