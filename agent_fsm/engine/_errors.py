"""
The exceptions agent_fsm raises, and why each is separate.

This module imports nothing from the package, so every module can raise
from it. The errors raised *during* a run carry the run's state (see
"failures" below).

Model text never raises: a malformed proposal becomes an ``invalid``
observation. What raises is a *programmer* error (a bad tool definition, a
handler bug, resuming a run that is not paused) or a broken machine
definition. The tree::

    * AgentFSMError
      + DefinitionError (also TypeError)      -- set-up: bad tool or machine definition
        - ToolDefinitionError                 -- a ToolSpec's schema or name is unusable
        - MachineDefinitionError              -- a MachineSpec is inconsistent
        - OutputDefinitionError               -- an output= type or schema cannot be used
      + RunError (also RuntimeError)          -- during a run
        - HandlerError                        -- a tool handler raised an unexpected exception
        - GateError                           -- a gate raised or returned something that is not a verdict
        - ScreenError                         -- a screen raised or returned something that is not a verdict
        - InvalidTransition                   -- the machine had no edge to take (a definition bug)
        - NotPaused (also ValueError)         -- resume() on a run that is not awaiting approval
        - StateError (also ValueError)        -- a run state that disagrees with its own transcript
      + ProviderFailure (also OSError)        -- a model provider could not deliver a reply
      + ScriptExhausted (also LookupError)    -- a ScriptedModel was asked past the end of its script
      + DecisionRefused (also ValueError)     -- a human's decision on a paused run was not taken
        - AlreadyDecided                      -- the pause it names is not open any more
        - UngatedApproval                     -- an approval of a call no gate given could allow
    * UngatedEffects (a UserWarning)          -- an agent with effectful tools and no gate: they are always refused
    * ToolError                               -- raised *by handlers* for an expected failure
    * ApprovalNeeded                          -- raised *by handlers* before an effect a person must approve


[failures]
The errors raised while a run is in flight; each carries the run's state so nothing is lost.

They hold a :class:`~agent_fsm.engine.RunState` (imported only for typing,
so :mod:`~agent_fsm.engine._state` may raise them) and are raised by the
driver, the boundary and the gates; the exception tree is drawn above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_fsm.engine._state import RunState
    from agent_fsm.engine._tools import ToolCall

__all__ = [
    "AgentFSMError",
    "ApprovalNeeded",
    "AlreadyDecided",
    "AnswerRefused",
    "DecisionRefused",
    "DefinitionError",
    "GateError",
    "HandlerError",
    "InvalidTransition",
    "MachineDefinitionError",
    "NotPaused",
    "NotSynchronous",
    "OutcomeUnknown",
    "OutputDefinitionError",
    "ProviderFailure",
    "RunError",
    "ScreenError",
    "ScriptExhausted",
    "StateError",
    "ToolDefinitionError",
    "ToolError",
    "UngatedApproval",
    "UngatedEffects",
]


# --- errors ---


class AgentFSMError(Exception):
    """Root of every exception agent_fsm raises on its own behalf."""


class DefinitionError(AgentFSMError, TypeError):
    """Something was set up wrongly; raised before any run starts."""


class ToolDefinitionError(DefinitionError):
    """A tool's contract cannot be used (for example an invalid JSON Schema)."""


class MachineDefinitionError(DefinitionError):
    """A machine definition names unknown states, guards or callbacks."""


class OutputDefinitionError(DefinitionError):
    """
    What ``output=`` names cannot be a final answer's contract (a hostile schema, a type with no JSON form).

    .. versionadded:: 0.2
    """


class ProviderFailure(AgentFSMError, OSError):
    """A model provider could not deliver a reply.

    It is an ``OSError`` so that the engine's single rule applies: any
    ``OSError`` from a model ends the run in ``provider_error``. Adapters
    raise it with a short ``kind`` (``timeout``, ``http``, ``transport``,
    ``bad_response``, ``request_limit``) and, for HTTP failures, ``status``.
    """

    def __init__(self, message: str, *, kind: str = "transport", status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status = status


class ScriptExhausted(AgentFSMError, LookupError):
    """
    A :class:`agent_fsm.ScriptedModel` was asked for a turn its script does not hold.

    A script that lacks its final answer is a mistake in the test, not an
    answer: the model raises rather than make one up (the run fails with a
    :class:`RunError` caused by this one). Pass ``last_word=`` to the model
    when a closing answer past the script is what the test means.

    .. versionadded:: 0.2
    """


class ToolError(Exception):
    """Raise from a tool handler for an expected, informative failure.

    The failure becomes an ``error`` observation the model can read. ``data``,
    when given, is the observation's content instead of the message (it must
    be JSON data). ``permanent=True`` says that retrying cannot help (a
    permission the service will never grant, a record that is gone): the
    observation is marked permanent and the run ends ``handoff`` instead of
    offering the model another proposal. A transient failure (the default)
    leaves the next step to the model.
    """

    def __init__(self, message: str, *, data: Any = None, permanent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.data = data
        self.permanent = permanent


class OutcomeUnknown(ToolError):
    """Raise from an effectful handler when its effect may or may not have happened (a timeout, a lost connection).

    A ``TimeoutError`` from an effectful handler means the same. The engine
    never guesses: an idempotent tool is tried again under the same
    idempotency key while its ``retries`` last; any other call pauses for a
    person, exactly as after a crash between intent and result (approve runs
    it again under the same key, reject records it as not run).

    .. versionadded:: 0.2
    """


class ApprovalNeeded(Exception):
    """Raise from a tool handler, before its effect, when a person must approve this call first.

    The run pauses on the call exactly as if the gate had asked (``awaiting_approval``,
    with ``reason``); on approval the handler runs again and its
    ``context.approved`` is true, so it goes ahead; on rejection the model
    reads that a person refused. It is no :class:`ToolError`: nothing failed,
    and it is never retried. Raise it only before the effect: what ran
    before it will run again.

    .. versionadded:: 0.2
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --- failures ---


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


class ScreenError(RunError):
    """An input or result screen raised, or returned something that is not ``None``, a ``Redact`` or an ``Ending``."""


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


class NotSynchronous(RunError, TypeError):
    """The synchronous driver met an ``async`` model, gate, handler or answer check: run it with the async driver."""


class DecisionRefused(AgentFSMError, ValueError):
    """
    A human's decision on a paused run was not taken: the run is not paused there, or the decision is bad.

    ``kind`` names why (``NotPaused``, ``AlreadyDecided``, ``BadDecision``);
    ``state`` is the run's state where one was at hand (a stale commit's).

    .. versionadded:: 0.2
    """

    def __init__(self, message: str, kind: str = "BadDecision", *, state: RunState | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.state = state


class AlreadyDecided(DecisionRefused):
    """
    The pause a decision names is not open any more: another decision won, or the run moved on.

    Of two concurrent decisions on one pause, exactly one succeeds; the other
    raises this, wherever the run lives (a store, a Temporal workflow). So does
    a commit of a state that is not the run's latest (a paused state kept aside
    and resumed after its pause was decided): a stale copy decides nothing.
    """

    def __init__(self, message: str, kind: str = "AlreadyDecided", *, state: RunState | None = None) -> None:
        super().__init__(message, kind, state=state)


class UngatedApproval(DecisionRefused):
    """
    An approval that could not be carried out: the blocked call changes the world and no gate was given.

    With no gate the engine's default refuses every effectful call, and an
    approval only turns a gate's ``ask`` into permission; taking the approval
    would end the call as a quiet denial. Raised before anything is decided
    (the pause stays open): decide again with the gate the run paused under.

    .. versionadded:: 0.2
    """

    def __init__(self, message: str, kind: str = "UngatedApproval", *, state: RunState | None = None) -> None:
        super().__init__(message, kind, state=state)


class UngatedEffects(UserWarning):
    """
    An agent was built with effectful tools and no gate: every call to them will be refused.

    That is the secure default, but rarely what was meant; pass the gate that
    allows them, or ``gate=deny_effects(tools)`` to say the refusal is meant
    (which silences this warning).

    .. versionadded:: 0.2
    """


class AnswerRefused(DecisionRefused):
    """
    A person's answer does not meet the result schema of the tool it answers: refused, the pause still open.

    ``problems`` lists every way it fails; the model never sees it. Also
    raised for an answer to a call whose tool a person does not answer.
    """

    def __init__(
        self, message: str, problems: list[str], kind: str = "BadAnswer", *, state: RunState | None = None
    ) -> None:
        super().__init__(message, kind, state=state)
        self.problems = problems
