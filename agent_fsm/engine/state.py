"""
The run's state as plain data, and the result a run returns.

Nothing about a run lives anywhere else: save a :class:`RunState` as JSON,
load it in another process, and :func:`agent_fsm.resume` carries on exactly
as it would have in memory.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import attrs

from agent_fsm.engine.limits import Limits, Stop
from agent_fsm.engine.observe import Observation
from agent_fsm.engine.tools import ToolCall

__all__ = ["Judgement", "Pause", "ProviderFault", "RunResult", "RunState"]

FORMAT = 2
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


@attrs.frozen
class Pause:
    """
    Why a run waits for a human, and exactly which call the human is asked about.

    ``pause_id`` is unique to this pause (the run's id and the pause's ordinal),
    so an application or a store can record that it was decided once.
    ``fingerprint`` is :func:`agent_fsm.engine.approval.call_fingerprint` of the
    blocked call (call id, tool name, canonical arguments): an approval covers
    that call and nothing else. ``reason`` is the gate's.
    """

    pause_id: str
    fingerprint: str
    reason: str


def _new_run_id() -> str:
    # uuid.uuid4().hex without building a UUID object (several microseconds of every run's start):
    # 16 random bytes with the version 4 and RFC 4122 variant bits set, as uuid4 sets them.
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return raw.hex()


# No validation on assignment: the driver sets fields many times a turn, and a
# state is checked where it crosses a trust boundary (RunState.from_json,
# state_problem on advance/resume), not on every write.
@attrs.define(eq=True, on_setattr=attrs.setters.NO_OP)
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
    # The budgets the run was started (or last resumed) under: a resume
    # without ``limits=`` keeps them, so a run cannot outgrow its budgets by
    # being saved and loaded.
    limits: Limits | None = None
    # The open pause (set while ``AwaitingApproval``), and the run's identity
    # that makes each pause id unique across runs.
    pause: Pause | None = None
    run_id: str = attrs.field(factory=_new_run_id)
    # Set on a paused state once resume() has used it: a state object is
    # decided once. (The same saved JSON loaded twice is two objects; see
    # resume(seen=...) and docs/security.md.)
    consumed: bool = False
    # No-progress bookkeeping, O(1) per rejection: the fingerprints of the
    # last two rejected proposals, and how many consecutive rejections so far
    # alternated between two different proposals (A, B, A, B ...).
    recent_rejections: list[str] = attrs.field(factory=list)
    alternation: int = 0
    # Seconds spent in the drivers under a time budget (Limits.max_seconds), pauses excluded.
    elapsed: float = 0.0

    def to_json(self, *, key: bytes | None = None) -> str:
        """
        This state as strict JSON text (lossless: ``from_json(s.to_json()) == s``).

        With ``key``, the text is signed (HMAC-SHA256) and :meth:`from_json`
        must be given the same key: use it whenever the state travels through
        hands that are not yours (a browser, a queue, a ticket system).

        Raises:
            ValueError: the state holds something strict JSON cannot (NaN, a non-JSON object, too deep).
        """
        return _saved_format()[0](self, key)

    @classmethod
    def from_json(cls, text: str, *, key: bytes | None = None) -> RunState:
        """
        Read a state written by :meth:`to_json`, checking every field and the counters' consistency.

        Nothing is coerced: a wrong type, an unknown machine state, a counter
        that disagrees with the transcript, a missing or extra field is refused.

        Raises:
            ValueError: the text is not a saved run state of this format; the
                message names the dotted path of the first problem. With
                ``key``, also when the signature is missing or does not match.
        """
        return _saved_format()[1](text, key)

    @property
    def stop(self) -> Stop | None:
        """The typed ending this state is in, or ``None`` while the run is still working."""
        from agent_fsm.engine.machine import RUN_MACHINE

        return RUN_MACHINE.stop_of(self.machine_state)


@functools.cache
def _saved_format() -> tuple[Callable[[RunState, bytes | None], str], Callable[[Any, bytes | None], RunState]]:
    # Imported on first use (it imports this module), then kept: an import
    # statement on every save or load would cost more than reading a small state.
    from agent_fsm.engine.saved import dump_state, load_state

    return dump_state, load_state


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
