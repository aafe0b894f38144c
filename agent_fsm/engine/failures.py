"""
The errors raised while a run is in flight; each carries the run's state so nothing is lost.

They sit above :mod:`~agent_fsm.engine.state` (which they hold) and below
the driver, the boundary and the gates (which raise them); the exception
tree is drawn in :mod:`agent_fsm.engine.errors`.
"""

from __future__ import annotations

from agent_fsm.engine.errors import AgentFSMError
from agent_fsm.engine.state import RunState
from agent_fsm.engine.tools import ToolCall

__all__ = ["GateError", "HandlerError", "InvalidTransition", "NotPaused", "RunError", "StateError"]


class RunError(AgentFSMError, RuntimeError):
    """A run could not continue because of a bug outside the model's control.

    ``state`` is the run's state at the moment of failure, so nothing the run
    did before the failure is lost.
    """

    def __init__(self, message: str, *, state: RunState | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.state = state


class HandlerError(RunError):
    """A tool handler raised an exception that is not an expected tool failure.

    Expected failures (:class:`ToolError`, ``KeyError``, ``ValueError``,
    ``TimeoutError``) become ``error`` observations. Anything else is a bug in
    the handler; reporting it to the model as an observation would only
    encourage it to work around a defect, so the run halts loudly instead. The original
    exception is ``__cause__``.
    """

    def __init__(self, message: str, *, state: RunState | None, call: ToolCall) -> None:
        super().__init__(message, state=state)
        self.call = call


class GateError(RunError):
    """A gate raised, or returned something that is neither a Verdict nor ``(bool, str)``."""


class InvalidTransition(RunError):
    """No edge of the machine could be taken from the current state.

    This is a defect of the machine definition (a state without a fallback
    edge), never of model text.
    """

    def __init__(self, message: str, *, state: RunState | None, machine_state: str, event: str) -> None:
        super().__init__(message, state=state)
        self.machine_state = machine_state
        self.event = event


class NotPaused(RunError, ValueError):
    """``resume`` was called on a run that is not awaiting approval."""


class StateError(RunError, ValueError):
    """A run state handed to the driver disagrees with itself (edited, forged, or built by hand).

    Its counters, indices or pause do not match its transcript, so no
    decision can be taken from it. ``RunState.from_json`` refuses such text
    with a plain ``ValueError``; this is the same refusal for a state object.
    """
