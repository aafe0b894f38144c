"""
The run's state as plain data, and the result a run returns.

Nothing about a run lives anywhere else: save a :class:`RunState` as JSON,
load it in another process, and :func:`agent_fsm.resume` carries on exactly
as it would have in memory.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import cattrs

from agent_fsm.engine.limits import Stop
from agent_fsm.engine.observe import Observation
from agent_fsm.engine.tools import ToolCall

__all__ = ["Judgement", "ProviderFault", "RunResult", "RunState"]

FORMAT = 1
"""Version of the saved-state format; bumped on any incompatible change."""


@attrs.frozen
class ProviderFault:
    """Why the model could not be reached: the exception type, a short kind, HTTP status, message."""

    type: str
    kind: str
    message: str
    status: int | None = None


@attrs.frozen
class Judgement:
    """
    What the engine decided about the proposal at the head of ``pending``.

    ``invalid`` (it broke the contract), ``denied`` (the gate or a human
    refused), ``ask`` (the gate wants a human) or ``allow``.
    """

    kind: str = attrs.field(validator=attrs.validators.in_(("invalid", "denied", "ask", "allow")))
    reason: str


@attrs.define(eq=True)
class RunState:
    """
    Everything the engine knows about one run.

    ``messages`` is the transcript in OpenAI wire format, ``observations`` the
    typed result of every attempted call, ``prompt_token_log`` the size of
    every prompt sent. ``pending`` holds the current reply's calls that have
    not been judged yet (its head is the call being judged, executed or
    awaiting approval). ``machine_state`` is where the run is in the machine.
    """

    messages: list[dict[str, Any]] = attrs.field(factory=list)
    observations: list[Observation] = attrs.field(factory=list)
    prompt_token_log: list[int] = attrs.field(factory=list)
    turns: int = 0
    tool_attempts: int = 0
    machine_state: str = "Ready"
    # Every state the run entered, in order: the trace that diagrams and
    # reviews read, so nothing about the route has to be inferred.
    path: list[str] = attrs.field(factory=list)
    pending: list[ToolCall] = attrs.field(factory=list)
    judgement: Judgement | None = None
    denials: dict[str, int] = attrs.field(factory=dict)
    answer: str | None = None
    # How many messages the run started with (system prompt, history, task):
    # what came before is a conversation's past, not this run's record.
    opening: int = 0
    fault: ProviderFault | None = None
    # Estimated tokens of ``messages``, kept as messages are appended so each
    # is measured once; ``usage_offset`` corrects it with a provider's count.
    message_tokens: int = 0
    usage_offset: int = 0
    # How the latest model reply ended, as its adapter reported it
    # (``ModelReply.finish``: "stop", "length", "refusal", ...), else None.
    finish: str | None = None
    # The world's own ending (agent_fsm.Ending), once the run rests on one; kept here so it survives a save.
    code: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.matches_re(r"[a-z][a-z0-9_]{0,63}"))
    )
    # Set while the run rests in ``AwaitingApproval``: unique to this pause,
    # so a decision names the pause it decides and is applied once.
    pause_id: str | None = None

    def to_json(self) -> str:
        """This state as JSON text (lossless: ``from_json(s.to_json()) == s``)."""
        data = _converter.unstructure(self)
        data["format"] = FORMAT
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> RunState:
        """
        Read a state written by :meth:`to_json`.

        Raises:
            ValueError: the text is not JSON, or not a saved run state of this format.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"saved run state is not JSON: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a saved agent_fsm run state (format {FORMAT} expected)")
        data.pop("format")
        try:
            return _converter.structure(data, cls)
        except (cattrs.BaseValidationError, TypeError, ValueError) as exc:
            detail = "; ".join(cattrs.transform_error(exc)) if isinstance(exc, cattrs.BaseValidationError) else exc
            raise ValueError(f"saved run state is malformed: {detail}") from exc

    @property
    def stop(self) -> Stop | None:
        """The typed ending this state is in, or ``None`` while the run is still working."""
        from agent_fsm.engine.machine import RUN_MACHINE

        return RUN_MACHINE.stop_of(self.machine_state)


_converter = cattrs.Converter(forbid_extra_keys=True)
_converter.register_structure_hook(Any, lambda value, _: value)


@attrs.frozen
class RunResult:
    """
    How a run ended (typed), its answer if it gave one, and every detail of its state.

    ``blocked_on`` is the call awaiting a human when ``stop`` is
    ``awaiting_approval``, else ``None``. ``reason`` says in words why the
    run stopped (the last denial, the refused answer, the provider's error).
    """

    stop: Stop
    answer: str | None
    state: RunState
    blocked_on: ToolCall | None = None
    reason: str | None = None  # why it stopped, in words (None for a plain answer)
    # The world's ending (see agent_fsm.Ending): always set, the stop's own value when the world declared none.
    code: str = attrs.field(default=attrs.Factory(lambda self: self.stop.value, takes_self=True))
