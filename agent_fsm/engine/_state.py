"""
The run's state as plain data, the result a run returns, and the saved form of both.

Nothing about a run lives anywhere else: save a :class:`RunState` as JSON,
load it in another process, and resume carries on exactly as in memory. A
saved state is data that may have been edited, truncated or forged, so it
is read without coercion and its counters are checked against its
transcript (:func:`state_problem`) before anything is decided from it;
whether it is *authentic* only a signature (``key=``) can tell, and the
driver never takes authority from a state either way (docs/security.md).

The strict reader (:func:`read_state`) has one rule per field and names the
first problem by its dotted path; the fast reader (:func:`quick_state`)
accepts a state as this engine writes it in one pass, or answers ``None``
and leaves the wording to the strict one. Sections: the records,
consistency, the strict reader, the fast reader, the format (writer,
signature), the state at rest (a paused run held compact), views.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import operator
import os
import re
import threading
import types
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any, SupportsIndex

import attrs

from agent_fsm.engine._context import (
    Compaction,
    PromptEntry,
    prompt_problem,
    read_compactions,
    read_prompt,
    write_compactions,
    write_prompt,
)
from agent_fsm.engine._endings import CODE_PATTERN
from agent_fsm.engine._json import DEPTH_CEILING, argument_problem
from agent_fsm.engine._limits import DEFAULT_LIMITS, Limits, Stop, Usage
from agent_fsm.engine._machine import RUN_MACHINE
from agent_fsm.engine._messages import Observation, format_transcript
from agent_fsm.engine._tools import ToolCall, call_fingerprint

__all__ = [
    "BadField",
    "ENABLED",
    "Judgement",
    "Pause",
    "ProviderFault",
    "RunResult",
    "RunState",
    "blocked_call",
    "STATES",
    "ScreenRecord",
    "StateWriter",
    "dump_state",
    "format_result",
    "json_kind",
    "load_state",
    "quick_state",
    "read_limits",
    "read_state",
    "rest",
    "state_problem",
]


# --- state ---

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
    ``fingerprint`` is :func:`agent_fsm.engine._tools.call_fingerprint` of the
    blocked call (call id, tool name, canonical arguments): an approval covers
    that call and nothing else. ``reason`` is the gate's.
    """

    pause_id: str
    fingerprint: str
    reason: str


@attrs.frozen
class ScreenRecord:
    """
    One screen's verdict, kept with the run: which ``stage`` (``input``: the task; ``result``: the observation
    answering ``call_id``), the ``action`` taken (``pass``, ``redact`` or ``stop``), the screen's ``code``, its reason.

    A redacted observation is kept twice: raw in ``RunState.observations``, as the model was shown it in
    ``RunState.messages``.
    """

    # No validators: the engine makes one per screened observation, and a saved one is checked by the reader.
    stage: str
    call_id: str | None
    action: str
    code: str | None = None
    reason: str = ""


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

    The state of a run returned paused rests compact until its transcript or
    an empty container is first used (see :func:`rest`): the same values then.
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
    # The agent the run belongs to: its name and the digest of its tool contracts
    # (Agent.digest), so a store, the inbox and the CLI can say when a run is
    # decided by another agent than the one that ran it. Information, never authority.
    agent: str | None = None
    agent_digest: str | None = None
    # Every input and result screen's verdict, in order (see agent_fsm.Agent's screen_input and screen_result).
    screens: list[ScreenRecord] = attrs.field(factory=list)
    # The prompt when it differs from the transcript (after a compaction): transcript indices and
    # stand-ins (agent_fsm.engine._context); None: the prompt is the transcript. And each compaction made.
    prompt: list[PromptEntry] | None = None
    compactions: list[Compaction] = attrs.field(factory=list)
    # Typed output (Agent(output=...)): the accepted answer as validated JSON (set only in Answered),
    # and how many invalid answers went back to the model (at most Limits.output_retries).
    output: Any = None
    output_rejections: int = 0
    # What the run spent (tokens in and out, money under a price table), how many
    # calls each tool with a max_calls cap executed, and which model of a
    # FallbackModel's chain the current turn is on (0: the primary).
    usage: Usage = attrs.field(factory=Usage)
    tool_uses: dict[str, int] = attrs.field(factory=dict)
    model_attempt: int = 0
    # The runs of other agents this run nested (an agent as a tool, a handoff), by the call that ran each:
    # whole states of their own, saved within this one. The one under the head pending call may be in flight.
    children: dict[str, RunState] = attrs.field(factory=dict)

    def to_json(self, *, key: bytes | None = None) -> str:
        """
        This state as strict JSON text (lossless: ``from_json(s.to_json()) == s``).

        With ``key``, the text is signed (HMAC-SHA256) and :meth:`from_json`
        must be given the same key: use it whenever the state travels through
        hands that are not yours (a browser, a queue, a ticket system).

        Raises:
            ValueError: the state holds something strict JSON cannot (NaN, a non-JSON object, too deep).
        """
        return dump_state(self, key)

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
        return load_state(text, key)

    @property
    def stop(self) -> Stop | None:
        """The typed ending this state is in, or ``None`` while the run is still working."""
        return RUN_MACHINE.stop_of(self.machine_state)


@attrs.frozen
class RunResult:
    """
    How a run ended (typed), its answer if it gave one, and every detail of its state.

    ``blocked_on`` is the call awaiting a human when ``stop`` is
    ``awaiting_approval``, else ``None``: the innermost one when the run
    paused inside an agent it runs as a tool (``blocked_path`` leads to it). ``reason`` says in words why the
    run stopped (the last denial, the refused answer, the provider's error).
    ``output`` is the typed answer when the agent has ``output=`` and the
    run was answered: a dict for a JSON Schema, an instance for a class.
    """

    stop: Stop
    answer: str | None
    state: RunState
    blocked_on: ToolCall | None = None
    reason: str | None = None  # why it stopped, in words (None for a plain answer)
    # The world's ending (see agent_fsm.Ending): always set, the stop's own value when the world declared none.
    code: str = attrs.field(default=attrs.Factory(lambda self: self.stop.value, takes_self=True))
    output: Any = None
    # While paused: the ids of the calls from this run's down to ``blocked_on``, which a run nested in a
    # tool call (an agent run as a tool) may hold; one id when the run's own call is blocked.
    blocked_path: tuple[str, ...] = ()

    @property
    def usage(self) -> Usage:
        """What the run spent: ``.tokens`` in and out, and ``.cost`` under the agent's prices."""
        return self.state.usage


def blocked_call(state: RunState) -> tuple[ToolCall, tuple[str, ...]]:
    """The call a paused run waits on, found by following paused nested runs down, and the call ids to it."""
    path = []
    while True:
        call = state.pending[0]
        path.append(call.call_id)
        child = state.children.get(call.call_id) if state.children else None
        if child is None or child.machine_state != "AwaitingApproval" or not child.pending:
            return call, tuple(path)
        state = child


# --- consistency ---

STATES = frozenset(s.name for s in RUN_MACHINE.states)
"""The names of the run machine's states: nothing else is a machine state."""

_COUNTERS = ("turns", "tool_attempts", "opening", "message_tokens", "alternation")


def state_problem(state: RunState) -> tuple[str, str] | None:
    """
    The first way ``state`` disagrees with itself, as ``(dotted path, what is wrong)``; ``None`` if consistent.

    Checked: counters are whole numbers >= 0; one logged prompt per turn; no
    more assistant replies than turns and no fewer handler attempts than
    executed calls; observations answer this run's tool messages one to one;
    every pending call was proposed by the latest reply, is unanswered and
    carries the reply's text; a pause exactly while awaiting approval, bound
    to the blocked call.
    """
    turns, attempts, opening, tokens, alternation = (
        state.turns, state.tool_attempts, state.opening, state.message_tokens, state.alternation
    )  # fmt: skip
    counts = (turns, attempts, opening, tokens, alternation)
    if (
        type(turns) is not int or type(attempts) is not int or type(opening) is not int or type(tokens) is not int
        or type(alternation) is not int or min(counts) < 0
    ):  # fmt: skip
        for name, value in zip(_COUNTERS, counts, strict=True):
            if type(value) is not int or value < 0:
                return name, f"expected a whole number >= 0, got {value!r}"
    if state.machine_state not in STATES:
        return "machine_state", f"expected a state of the run machine, got {state.machine_state!r}"
    messages = state.messages
    if opening > len(messages):
        return "opening", f"{opening} opening messages but the transcript holds {len(messages)}"
    if len(state.prompt_token_log) != turns:
        return "turns", f"{turns} model calls but {len(state.prompt_token_log)} prompt sizes logged"
    replies = 0
    answered: list[Any] = []
    last_reply: dict[str, Any] | None = None
    since_reply = 0  # tool messages answering the latest reply
    for message in messages[opening:] if opening else messages:
        role = message.get("role")
        if role == "assistant":
            replies += 1
            last_reply = message
            since_reply = 0
        elif role == "tool":
            answered.append(message.get("tool_call_id"))
            since_reply += 1
    if replies > state.turns:
        return "turns", f"{state.turns} model calls but {replies} replies in the transcript"
    observations = state.observations
    if len(answered) != len(observations):
        return "observations", f"{len(observations)} observations but {len(answered)} tool messages in this run"
    executed = 0
    for index, observation in enumerate(observations):
        if not isinstance(observation, Observation):
            return f"observations.{index}", f"expected an Observation, got {observation!r}"
        if observation.call_id != answered[index]:
            return (
                f"observations.{index}.call_id",
                f"{observation.call_id!r} but its tool message answers {answered[index]!r}",
            )
        executed += observation.kind in ("result", "error")
    if state.tool_attempts < executed:
        return "tool_attempts", f"{state.tool_attempts} handler attempts but {executed} calls were executed"
    if state.pending:
        problem = _pending_problem(state, last_reply, set(answered[len(answered) - since_reply :]))
        if problem is not None:
            return problem
    if state.machine_state == "ScreeningResult" and not observations:
        return "machine_state", "a run screening a result holds no observation to screen"
    paused = state.machine_state == "AwaitingApproval"
    if paused and (state.pause is None or not state.pending):
        return "pause", "a run awaiting approval must hold its pause and the blocked call"
    if state.output is not None and state.machine_state != "Answered":
        return "output", f"typed output is recorded but the run is in {state.machine_state!r}"
    if type(state.output_rejections) is not int or state.output_rejections < 0:
        return "output_rejections", f"expected a whole number >= 0, got {state.output_rejections!r}"
    if not paused and state.pause is not None:
        return "pause", f"a pause is recorded but the run is in {state.machine_state!r}"
    if state.pause is not None and state.pause.fingerprint != call_fingerprint(state.pending[0]):
        return "pause.fingerprint", "does not match the blocked call (the call or the pause was edited)"
    if state.prompt is not None:
        wrong = prompt_problem(messages, state.prompt, opening)
        if wrong is not None:
            return "prompt", wrong
    if state.children:
        return _children_problem(state)
    return None


def _children_problem(state: RunState) -> tuple[str, str] | None:
    """A nested run must be named for this run and the call that ran it, and agree with itself."""
    calls = (m.get("tool_calls") for m in state.messages if m.get("role") == "assistant")
    proposed = {c.get("id") for listed in calls if isinstance(listed, list) for c in listed if isinstance(c, dict)}
    for key, child in state.children.items():
        if key not in proposed:  # a run is nested only by a call the model made in this run
            return f"children.{key}", "no call of that id was proposed in this run"
        if not isinstance(child, RunState):
            return f"children.{key}", f"expected a RunState, got {child!r}"
        if child.run_id != f"{state.run_id}/{key}":
            return f"children.{key}.run_id", f"expected {state.run_id}/{key!s}, got {child.run_id!r}"
        problem = state_problem(child)
        if problem is not None:
            return f"children.{key}.{problem[0]}", problem[1]
    return None


def _pending_problem(state: RunState, reply: dict[str, Any] | None, answered: set[Any]) -> tuple[str, str] | None:
    proposed: dict[Any, Any] = {}
    for item in (reply or {}).get("tool_calls") or ():
        if isinstance(item, dict):
            proposed[item.get("id")] = item.get("function")
    for index, call in enumerate(state.pending):  # the dotted path is spelled only when reported
        if not isinstance(call, ToolCall):
            return f"pending.{index}", f"expected a ToolCall, got {call!r}"
        function = proposed.get(call.call_id)
        if not isinstance(function, dict):
            return f"pending.{index}.call_id", f"{call.call_id!r} was not proposed by the latest reply"
        if call.call_id in answered:
            return f"pending.{index}.call_id", f"{call.call_id!r} was already answered"
        if function.get("name") != call.name:
            return f"pending.{index}.name", f"{call.name!r} but the reply proposed {function.get('name')!r}"
        if function.get("arguments") != call.raw_arguments:
            return f"pending.{index}.raw_arguments", "differs from the arguments text of the reply"
        if call.arguments is not None and not _same_arguments(call.raw_arguments, call.arguments):
            return f"pending.{index}.arguments", "differ from the arguments the reply's text holds"
    return None


def _same_arguments(raw: str | None, arguments: dict[str, Any]) -> bool:
    if raw is None or not raw.strip():
        return arguments == {} or raw is None
    try:
        parsed = _parse(raw)
    except (ValueError, RecursionError):
        return True  # text the engine could not parse either; the arguments are judged afresh anyway
    return bool(parsed == arguments) or json.dumps(parsed, sort_keys=True) == json.dumps(arguments, sort_keys=True)


# json.loads' own rules, without its per-call layers.
_scan_lenient: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _parse(text: str) -> Any:
    """``json.loads(text)``; a text that is one JSON value with nothing around it is scanned directly."""
    try:
        value, end = _scan_lenient(text, 0)
    except (StopIteration, ValueError, RecursionError):
        return json.loads(text)  # leading space, or not JSON: json.loads decides and words it
    return value if end == len(text) else json.loads(text)


# --- the saved form, declared once ---

SAVED_FIELDS: tuple[str, ...] = tuple(f.name for f in attrs.fields(RunState))
"""
The fields of a saved state, in the order they are written.

Derived from :class:`RunState` itself: the writer, the strict reader and the
fast reader each derive from this list, and a field added to the state
without a rule in the strict reader fails at import, not at the first save.
"""

ADDED_FIELDS = frozenset(
    {
        "elapsed",
        "agent",
        "agent_digest",
        "screens",
        "prompt",
        "compactions",
        "output",
        "output_rejections",
        "usage",
        "tool_uses",
        "model_attempt",
        "children",
    }
)
"""Fields added to format 2 after it was first written: a state saved before them loads with their defaults."""


# --- state_reader ---

_KINDS = ("result", "invalid", "denied", "error")
_JUDGEMENTS = ("invalid", "denied", "ask", "allow")


class BadField(Exception):
    """The first problem found: its dotted ``path`` and what is wrong there."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(path, detail)
        self.path = path
        self.detail = detail


def _show(value: Any) -> str:
    text = repr(value)
    return f"{text if len(text) <= 60 else text[:57] + '...'} (a JSON {json_kind(value)})"


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _expect(path: str, expected: str, value: Any) -> BadField:
    return BadField(path, f"expected {expected}, got {_show(value)}")


def _str(value: Any, path: str) -> str:
    if type(value) is not str:
        raise _expect(path, "a string", value)
    return value


def _opt_str(value: Any, path: str) -> str | None:
    return None if value is None else _str(value, path)


def _bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise _expect(path, "true or false", value)
    return value


def _int(value: Any, path: str, minimum: int | None = 0) -> int:
    if type(value) is not int:
        raise _expect(path, "a whole number", value)
    if minimum is not None and value < minimum:
        raise _expect(path, f"a whole number >= {minimum}", value)
    return value


def _list(value: Any, path: str) -> list[Any]:
    if type(value) is not list:
        raise _expect(path, "an array", value)
    return value


Shape = tuple[tuple[str, ...], frozenset[str]]


def _shape(names: tuple[str, ...]) -> Shape:
    return names, frozenset(names)


def _object(value: Any, path: str, shape: Shape, optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    if type(value) is not dict:
        raise _expect(path, "an object", value)
    if value.keys() != shape[1]:
        for name in shape[0]:
            if name not in value and name not in optional:
                raise BadField(f"{path}.{name}" if path else name, "missing")
        for name in value:
            if name not in shape[1]:
                raise BadField(f"{path}.{name}" if path else name, f"unknown field (known: {', '.join(shape[0])})")
    return value


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in attrs.fields(cls))


_OBSERVATION = _names(Observation)
_CALL = _names(ToolCall)
_LIMITS = _names(Limits)
_OBSERVATION_SHAPE = _shape(_OBSERVATION)
_CALL_SHAPE = _shape(_CALL)
_LIMITS_SHAPE = _shape(_LIMITS)
_JUDGEMENT_SHAPE = _shape(("kind", "reason"))
_FAULT_SHAPE = _shape(("type", "kind", "message", "status"))
_PAUSE_SHAPE = _shape(("pause_id", "fingerprint", "reason"))
_USAGE_SHAPE = _shape(_names(Usage))


Reader = Callable[[Any, str], Any]


# The records below are read once per saved call: their checks are written out,
# and a field's dotted path is only spelled when it is reported.


def _observation(value: Any, path: str) -> Observation:
    data = _object(value, path, _OBSERVATION_SHAPE)
    kind = data["kind"]
    if kind not in _KINDS:
        raise _expect(f"{path}.kind", f"one of {', '.join(_KINDS)}", kind)
    ok = data["ok"]
    if type(ok) is not bool:
        raise _expect(f"{path}.ok", "true or false", ok)
    if ok != (kind == "result"):
        raise BadField(f"{path}.ok", f"{ok} disagrees with kind {kind!r} (only a result is ok)")
    call_id = data["call_id"]
    if type(call_id) is not str:
        raise _expect(f"{path}.call_id", "a string", call_id)
    permanent = data["permanent"]
    if type(permanent) is not bool:
        raise _expect(f"{path}.permanent", "true or false", permanent)
    text_form = data["text_form"]
    if type(text_form) is not bool:
        raise _expect(f"{path}.text_form", "true or false", text_form)
    return Observation(call_id, ok, kind, data["content"], permanent=permanent, text_form=text_form)


def _call(value: Any, path: str) -> ToolCall:
    data = _object(value, path, _CALL_SHAPE)
    arguments = data["arguments"]
    if arguments is not None and type(arguments) is not dict:
        raise _expect(f"{path}.arguments", "an object or null", arguments)
    call_id, name, raw = data["call_id"], data["name"], data["raw_arguments"]
    if type(call_id) is not str:
        raise _expect(f"{path}.call_id", "a string", call_id)
    if type(name) is not str:
        raise _expect(f"{path}.name", "a string", name)
    if raw is not None and type(raw) is not str:
        raise _expect(f"{path}.raw_arguments", "a string", raw)
    original = data["original_id"]
    if original is not None and type(original) is not str:
        raise _expect(f"{path}.original_id", "a string or null", original)
    return ToolCall(call_id, name, arguments, raw, original_id=original)


def _messages(value: Any, path: str) -> list[dict[str, Any]]:
    for index, message in enumerate(_list(value, path)):
        if type(message) is not dict:
            raise _expect(f"{path}.{index}", "a message object", message)
        if type(message.get("role")) is not str:
            raise _expect(f"{path}.{index}.role", "a string", message.get("role"))
    return value  # type: ignore[no-any-return]


def _machine_state(value: Any, path: str) -> str:
    if type(value) is not str or value not in STATES:  # a type first: a list is not even hashable
        raise _expect(path, "a state of the run machine", value)
    return value


def _judgement(value: Any, path: str) -> Judgement | None:
    if value is None:
        return None
    data = _object(value, path, _JUDGEMENT_SHAPE)
    kind, reason = data["kind"], data["reason"]
    if kind not in _JUDGEMENTS:
        raise _expect(f"{path}.kind", f"one of {', '.join(_JUDGEMENTS)}", kind)
    if type(reason) is not str:
        raise _expect(f"{path}.reason", "a string", reason)
    return Judgement(kind, reason)


def _fault(value: Any, path: str) -> ProviderFault | None:
    if value is None:
        return None
    data = _object(value, path, _FAULT_SHAPE)
    status = data["status"]
    return ProviderFault(
        _str(data["type"], f"{path}.type"),
        _str(data["kind"], f"{path}.kind"),
        _str(data["message"], f"{path}.message"),
        None if status is None else _int(status, f"{path}.status"),
    )


def read_limits(value: Any, path: str) -> Limits | None:
    """The budgets a state was saved under (``None`` for null); one shared :class:`Limits` per distinct budgets."""
    if value is None:
        return None
    if type(value) is dict:  # budgets seen before (the same names, values and types: True is not 1) were checked
        key = (*value, *value.values(), *map(type, value.values()))
        try:
            return _LIMITS_SEEN[key]  # Limits are frozen: runs saved under the same budgets share one
        except (KeyError, TypeError):
            pass
    # Fields added to Limits later are optional here, so older saved states still load.
    data = _object(value, path, _LIMITS_SHAPE, _LIMITS_SHAPE[1])
    if data.get("max_cost") is not None:  # money is saved as decimal text, never a float
        data = {**data, "max_cost": _decimal(data["max_cost"], f"{path}.max_cost")}
    try:
        limits = Limits(**data)
    except (TypeError, ValueError) as exc:
        raise BadField(path, str(exc)) from None
    if len(_LIMITS_SEEN) >= 256:
        _LIMITS_SEEN.clear()
    _LIMITS_SEEN[key] = limits
    return limits


_LIMITS_SEEN: dict[tuple[Any, ...], Limits] = {}


_DECIMAL = re.compile(r"[0-9]{1,30}(\.[0-9]{1,80})?")


def _decimal(value: Any, path: str) -> Decimal:
    """An amount of money as saved: decimal text (digits, one optional point), never a float that rounds."""
    if type(value) is not str or _DECIMAL.fullmatch(value) is None:
        raise _expect(path, 'an amount as decimal text such as "0.0125"', value)
    return Decimal(value)


def _usage(value: Any, path: str) -> Usage:
    data = _object(value, path, _USAGE_SHAPE)
    return Usage(
        _int(data["input_tokens"], f"{path}.input_tokens"),
        _int(data["output_tokens"], f"{path}.output_tokens"),
        _int(data["cached_tokens"], f"{path}.cached_tokens"),
        _decimal(data["cost"], f"{path}.cost"),
    )


def _pause(value: Any, path: str) -> Pause | None:
    if value is None:
        return None
    data = _object(value, path, _PAUSE_SHAPE)
    for name in _PAUSE_SHAPE[0]:
        if type(data[name]) is not str:
            raise _expect(f"{path}.{name}", "a string", data[name])
    return Pause(data["pause_id"], data["fingerprint"], data["reason"])


def _denials(value: Any, path: str) -> dict[str, int]:
    if type(value) is not dict:
        raise _expect(path, "an object", value)
    for key, count in value.items():
        _int(count, f"{path}.{key}", 1)
    return value


def _code(value: Any, path: str) -> str | None:
    if value is not None and (type(value) is not str or CODE_PATTERN.fullmatch(value) is None):
        raise _expect(path, "null or an ending code (a lowercase identifier)", value)
    return value


def _ints(value: Any, path: str) -> list[int]:
    for index, item in enumerate(_list(value, path)):
        if type(item) is not int or item < 0:
            raise _expect(f"{path}.{index}", "a whole number >= 0", item)
    return value  # type: ignore[no-any-return]


def _states(value: Any, path: str) -> list[str]:
    for index, item in enumerate(_list(value, path)):
        if type(item) is not str or item not in STATES:
            raise _expect(f"{path}.{index}", "a state of the run machine", item)
    return value  # type: ignore[no-any-return]


def _recent(value: Any, path: str) -> list[str]:
    for index, item in enumerate(_list(value, path)):
        _str(item, f"{path}.{index}")
    if len(value) > 2:
        raise _expect(path, "at most two fingerprints", value)
    return value  # type: ignore[no-any-return]


def _seconds(value: Any, path: str) -> float:  # a float field: RunState.elapsed
    if type(value) in (int, float) and 0 <= value < math.inf:
        return float(value)
    raise _expect(path, "a number of seconds >= 0", value)


_SCREEN_SHAPE = _shape(("stage", "call_id", "action", "code", "reason"))


def _screens(value: Any, path: str) -> list[ScreenRecord]:
    found = []
    for index, item in enumerate(_list(value, path)):
        where = f"{path}.{index}"
        data = _object(item, where, _SCREEN_SHAPE)
        if data["stage"] not in ("input", "result"):
            raise _expect(f"{where}.stage", "input or result", data["stage"])
        if data["action"] not in ("pass", "redact", "stop"):
            raise _expect(f"{where}.action", "pass, redact or stop", data["action"])
        call_id = _opt_str(data["call_id"], f"{where}.call_id")
        if (call_id is None) != (data["stage"] == "input"):
            raise _expect(f"{where}.call_id", "a call id for a result's screen, null for the input's", call_id)
        code = _code(data["code"], f"{where}.code")
        found.append(
            ScreenRecord(data["stage"], call_id, data["action"], code, _str(data["reason"], f"{where}.reason"))
        )
    return found


def _json_value(value: Any, path: str) -> Any:  # typed output: plain JSON data, nested no deeper than a state may
    problem = argument_problem(value, max_depth=DEPTH_CEILING)
    if problem is not None:
        raise BadField(path, problem)
    return value


def _observations(value: Any, path: str) -> list[Observation]:
    return [_observation(o, f"{path}.{i}") for i, o in enumerate(_list(value, path))]


def _pending(value: Any, path: str) -> list[ToolCall]:
    return [_call(c, f"{path}.{i}") for i, c in enumerate(_list(value, path))]


def _relayed(reader: Callable[[Any, str], Any], value: Any, path: str) -> Any:
    """A reader of another module, its ``ValueError(path, detail)`` as a :class:`BadField`."""
    try:
        return reader(value, path)
    except ValueError as exc:
        raise BadField(*exc.args) from None


NESTING_CEILING = 8
"""How deep saved runs may nest in one another (an agent in an agent in ...): deeper is refused as malformed."""


def _children(value: Any, path: str) -> dict[str, RunState]:
    if type(value) is not dict:
        raise _expect(path, "an object of nested runs by call id", value)
    levels, level = path.split(".").count("children") - 1, [value] if value else []
    while level and levels <= NESTING_CEILING:  # counted before any child is read: both readers recurse per level
        levels += 1
        nested = (data.get("children") for children in level for data in children.values() if type(data) is dict)
        level = [children for children in nested if type(children) is dict and children]
    if levels > NESTING_CEILING:
        raise BadField(path, f"runs nest deeper than {NESTING_CEILING} levels")
    children = {}
    for key, data in value.items():
        where = f"{path}.{key}"
        if type(data) is not dict or data.get("format") != FORMAT or type(data.get("format")) is not int:
            raise _expect(where, f"a saved run state of format {FORMAT}", data)
        child = quick_state(data)
        if child is None:
            try:
                child = read_state(data)
            except BadField as bad:
                raise BadField(f"{where}.{bad.path}", bad.detail) from None
        children[key] = child
    return children


# One rule per saved field. A state is read in SAVED_FIELDS' order, so the first
# problem found is the first in the document.
_RULES: dict[str, Reader] = {
    "messages": _messages,
    "observations": _observations,
    "prompt_token_log": _ints,
    "turns": _int,
    "tool_attempts": _int,
    "machine_state": _machine_state,
    "path": _states,
    "pending": _pending,
    "judgement": _judgement,
    "denials": _denials,
    "answer": _opt_str,
    "opening": _int,
    "fault": _fault,
    "message_tokens": _int,
    "usage_offset": functools.partial(_int, minimum=None),
    "finish": _opt_str,
    "code": _code,
    "pause_id": _opt_str,
    "limits": read_limits,
    "pause": _pause,
    "run_id": _str,
    "consumed": _bool,
    "recent_rejections": _recent,
    "alternation": _int,
    "elapsed": _seconds,
    "agent": _opt_str,
    "agent_digest": _opt_str,
    "screens": _screens,
    "prompt": lambda value, path: _relayed(read_prompt, value, path),
    "compactions": lambda value, path: _relayed(read_compactions, value, path),
    "output": _json_value,
    "output_rejections": _int,
    "usage": _usage,
    "tool_uses": _denials,  # counts by tool name, each >= 1
    "model_attempt": _int,
    "children": lambda value, path: _children(value, path),
}
if set(_RULES) != set(SAVED_FIELDS):  # a field without a rule, or a rule for a field that is gone
    raise RuntimeError(f"the strict reader's rules do not cover the saved fields: {set(_RULES) ^ set(SAVED_FIELDS)}")
_READ_ORDER = tuple((name, _RULES[name]) for name in SAVED_FIELDS)
_TOP = _shape(("format", *SAVED_FIELDS))


def read_state(data: dict[str, Any]) -> RunState:
    """``data`` (a parsed saved state) as a :class:`RunState`, or :class:`BadField` naming the first problem."""
    _object(data, "", _TOP, ADDED_FIELDS)
    return RunState(**{name: rule(data[name], name) for name, rule in _READ_ORDER if name in data})


# --- state_fast_reader ---


# Field names and the attrs validators this module repeats, class by class (the state's fields are SAVED_FIELDS;
# that the code below sets every one of them is checked once, at the end of this module).
_RECORDS: dict[type, tuple[tuple[str, ...], dict[str, Any]]] = {
    Observation: (
        ("call_id", "ok", "kind", "content", "permanent", "text_form"),
        {"kind": attrs.validators.in_(_KINDS)},
    ),
    ToolCall: (("call_id", "name", "arguments", "raw_arguments", "original_id"), {}),
    Judgement: (("kind", "reason"), {"kind": attrs.validators.in_(_JUDGEMENTS)}),
    Pause: (("pause_id", "fingerprint", "reason"), {}),
    RunState: (SAVED_FIELDS, {"code": attrs.validators.optional(attrs.validators.matches_re(CODE_PATTERN.pattern))}),
}


def _plain(cls: type) -> bool:
    """Whether ``cls`` is exactly the record written out above: slots, these fields, these validators only."""
    names, checked = _RECORDS[cls]
    fields = attrs.fields(cls)
    if tuple(f.name for f in fields) != names or hasattr(cls, "__attrs_post_init__"):
        return False
    if hasattr(cls, "__attrs_pre_init__"):
        return False
    for f in fields:
        if f.converter is not None or not isinstance(getattr(cls, f.name, None), types.MemberDescriptorType):
            return False
        if f.validator is not None and repr(f.validator) != repr(checked.get(f.name)):
            return False
    return True


ENABLED = all(_plain(cls) for cls in _RECORDS) and RunState.__setattr__ is object.__setattr__
"""Whether the fast path is on (the record classes are as this module expects); else :func:`quick_state` declines."""


def _setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    slot: Any = getattr(cls, name, None)
    if not isinstance(slot, types.MemberDescriptorType):  # the class has changed: never called, ENABLED is off
        return _unused
    return slot.__set__


def _unused(record: Any, value: Any) -> None:
    raise AssertionError("the fast reader is off: its record classes are not the ones it was written for")


_new = object.__new__
_obs_call_id, _obs_ok, _obs_kind, _obs_content, _obs_permanent, _obs_text_form = (
    _setter(Observation, n) for n in _RECORDS[Observation][0]
)
_call_id, _call_name, _call_arguments, _call_raw, _call_original = (_setter(ToolCall, n) for n in _RECORDS[ToolCall][0])
_judgement_kind, _judgement_reason = (_setter(Judgement, n) for n in _RECORDS[Judgement][0])
_pause_id, _pause_fingerprint, _pause_reason = (_setter(Pause, n) for n in _RECORDS[Pause][0])

_QUICK_TOP = ("format", *SAVED_FIELDS)

# One shared string per name: a loaded state holds the same objects a run
# holds, not a fresh copy of "AwaitingApproval" for every step of its path
# (found by the lookup that checks the name anyway).
_STATE_NAMES = {name: name for name in STATES}
_state_name = _STATE_NAMES.__getitem__
_KIND_NAMES = {name: name for name in _KINDS}
_JUDGEMENT_NAMES = {name: name for name in _JUDGEMENTS}


def quick_state(data: dict[str, Any]) -> RunState | None:
    """
    ``data`` (a freshly parsed saved state) as a :class:`RunState` if it is plainly valid, else ``None``.

    "Plainly valid" is exactly what :func:`~agent_fsm.engine._state.read_state`
    accepts, and the state built is equal to the one it builds. The parsed data is
    owned by the state afterwards (its messages are kept, not copied), so the
    caller must have parsed it for this call alone.
    """
    size = len(data)
    # The right number of fields and, below, every field found: no field missing, none unknown.
    if not ENABLED:
        return None
    if size + sum(name not in data for name in ADDED_FIELDS) != len(_QUICK_TOP):
        return None
    try:
        return _state(data)
    except (KeyError, TypeError):  # a field or record field missing, or a name that is not even hashable
        return None


# Written out in one function, record by record: a call per field would cost
# more than the checks themselves.
def _state(data: dict[str, Any]) -> RunState | None:
    data["format"]  # its value is the caller's to check, but it must be there
    turns, tool_attempts, opening, tokens, offset, alternation, consumed = (
        data["turns"], data["tool_attempts"], data["opening"], data["message_tokens"], data["usage_offset"],
        data["alternation"], data["consumed"],
    )  # fmt: skip
    if type(turns) is not int or type(tool_attempts) is not int or type(opening) is not int:
        return None
    if type(tokens) is not int or type(offset) is not int or type(alternation) is not int:
        return None
    if turns < 0 or tool_attempts < 0 or opening < 0 or tokens < 0 or alternation < 0 or type(consumed) is not bool:
        return None
    answer, finish, code, pause_id, run_id = (
        data["answer"], data["finish"], data["code"], data["pause_id"], data["run_id"]
    )  # fmt: skip
    if (answer is not None and type(answer) is not str) or (finish is not None and type(finish) is not str):
        return None
    if (pause_id is not None and type(pause_id) is not str) or type(run_id) is not str:
        return None
    if code is not None and (type(code) is not str or CODE_PATTERN.fullmatch(code) is None):
        return None
    # The fields added later may be absent (the count above says how many are).
    elapsed, agent, digest = data.get("elapsed", 0.0), data.get("agent"), data.get("agent_digest")
    if (type(elapsed) is not float and type(elapsed) is not int) or not 0 <= elapsed < math.inf:
        return None
    if (agent is not None and type(agent) is not str) or (digest is not None and type(digest) is not str):
        return None
    prompt, compactions = data.get("prompt"), data.get("compactions", [])
    if prompt is not None or type(compactions) is not list or compactions:  # a compacted run: read the ordinary way
        try:
            prompt, compactions = read_prompt(prompt, "prompt"), read_compactions(compactions, "compactions")
        except ValueError:
            return None
    else:
        compactions = []
    output, output_rejections = data.get("output"), data.get("output_rejections", 0)
    if type(output_rejections) is not int or output_rejections < 0:
        return None
    if output is not None and argument_problem(output, max_depth=DEPTH_CEILING) is not None:
        return None
    usage, uses, attempt = data.get("usage"), data.get("tool_uses", _NO_USES), data.get("model_attempt", 0)
    if type(attempt) is not int or attempt < 0 or type(uses) is not dict:
        return None
    for n in uses.values():
        if type(n) is not int or n < 1:
            return None
    try:  # absent: a state saved before usage was kept; null or anything else odd: the strict reader words it
        usage = Usage() if usage is None and "usage" not in data else _usage(usage, "usage")
    except BadField:
        return None
    log, denials, recent = data["prompt_token_log"], data["denials"], data["recent_rejections"]
    if type(log) is not list or type(recent) is not list or len(recent) > 2 or type(denials) is not dict:
        return None
    for n in log:
        if type(n) is not int or n < 0:
            return None
    for r in recent:
        if type(r) is not str:
            return None
    for n in denials.values():
        if type(n) is not int or n < 1:
            return None
    machine_state = _state_name(data["machine_state"])  # an unknown state: KeyError
    path = data["path"]
    if type(path) is not list:
        return None
    path = list(map(_state_name, path))
    messages = data["messages"]
    if type(messages) is not list:
        return None
    for message in messages:  # kept as parsed: sharing the role names would cost more time than it saves
        if type(message) is not dict or type(message.get("role")) is not str:
            return None
    items = data["observations"]
    if type(items) is not list:
        return None
    observations = []
    for item in items:
        if type(item) is not dict or len(item) != 6:
            return None
        kind, ok, call_id, content, permanent, text_form = (
            item["kind"], item["ok"], item["call_id"], item["content"], item["permanent"], item["text_form"]
        )  # fmt: skip
        if type(kind) is not str or type(ok) is not bool or ok != (kind == "result") or type(call_id) is not str:
            return None
        if type(permanent) is not bool or type(text_form) is not bool:
            return None
        o = _new(Observation)
        _obs_call_id(o, call_id)
        _obs_ok(o, ok)
        _obs_kind(o, _KIND_NAMES[kind])  # not a kind: KeyError
        _obs_content(o, content)
        _obs_permanent(o, permanent)
        _obs_text_form(o, text_form)
        observations.append(o)
    items = data["pending"]
    if type(items) is not list:
        return None
    pending = []
    for item in items:
        if type(item) is not dict or len(item) != 5:
            return None
        call_id, name, arguments, raw, original = (
            item["call_id"], item["name"], item["arguments"], item["raw_arguments"], item["original_id"]
        )  # fmt: skip
        if type(call_id) is not str or type(name) is not str or (arguments is not None and type(arguments) is not dict):
            return None
        if (raw is not None and type(raw) is not str) or (original is not None and type(original) is not str):
            return None
        c = _new(ToolCall)
        _call_id(c, call_id)
        _call_name(c, name)
        _call_arguments(c, arguments)
        _call_raw(c, raw)
        _call_original(c, original)
        pending.append(c)
    pause: Pause | None = None
    found = data["pause"]
    if found is not None:
        if type(found) is not dict or len(found) != 3:
            return None
        fingerprint, reason, given_id = found["fingerprint"], found["reason"], found["pause_id"]
        if type(given_id) is not str or type(fingerprint) is not str or type(reason) is not str:
            return None
        if given_id == pause_id:
            given_id = pause_id  # one string for the state's and the pause's id, as a run holds it
        pause = _new(Pause)
        _pause_id(pause, given_id)
        _pause_fingerprint(pause, fingerprint)
        _pause_reason(pause, reason)
    judgement: Judgement | None = None
    found = data["judgement"]
    if found is not None:
        if type(found) is not dict or len(found) != 2:
            return None
        kind, reason = found["kind"], found["reason"]
        if type(reason) is not str:
            return None
        if pause is not None and reason == pause.reason:
            reason = pause.reason  # the gate's reason, held once
        judgement = _new(Judgement)
        _judgement_kind(judgement, _JUDGEMENT_NAMES[kind])  # not a kind: KeyError
        _judgement_reason(judgement, reason)
    fault = data["fault"]
    if fault is not None:
        fault = _quick_fault(fault)
        if fault is None:
            return None
    limits = data["limits"]
    if limits is not None:
        try:
            limits = read_limits(limits, "limits")
        except BadField:
            return None
    screens = data.get("screens", [])
    if screens:  # rare, and short: read by the strict rule
        try:
            screens = _screens(screens, "screens")
        except BadField:
            return None
    elif type(screens) is not list:
        return None
    state = _new(RunState)
    state.messages = messages
    state.observations = observations
    state.prompt_token_log = log
    state.turns = turns
    state.tool_attempts = tool_attempts
    state.machine_state = machine_state
    state.path = path
    state.pending = pending
    state.judgement = judgement
    state.denials = denials
    state.answer = answer
    state.opening = opening
    state.fault = fault
    state.message_tokens = tokens
    state.usage_offset = offset
    state.finish = finish
    state.code = code
    state.pause_id = pause_id
    state.limits = limits
    state.pause = pause
    state.run_id = run_id
    state.consumed = consumed
    state.recent_rejections = recent
    state.alternation = alternation
    state.elapsed = float(elapsed)
    state.agent = agent
    state.agent_digest = digest
    state.screens = screens
    state.prompt = prompt
    state.compactions = compactions
    state.output = output
    state.output_rejections = output_rejections
    state.usage = usage
    state.tool_uses = uses if uses is not _NO_USES else {}
    state.model_attempt = attempt
    children = data.get("children", _NO_CHILDREN)
    if children:  # a run that nested others: each read as a whole state (this reader or the strict one)
        try:
            children = _children(children, "children")
        except BadField:
            return None
    elif type(children) is not dict:
        return None
    state.children = children if children is not _NO_CHILDREN else {}
    return state


_NO_USES: dict[str, int] = {}
_NO_CHILDREN: dict[str, Any] = {}


def _quick_fault(data: Any) -> ProviderFault | None:  # rare (a run that ended provider_error): built the ordinary way
    if type(data) is not dict or len(data) != 4:
        return None
    kind, message, status, error_type = data["kind"], data["message"], data["status"], data["type"]
    if type(error_type) is not str or type(kind) is not str or type(message) is not str:
        return None
    if status is not None and (type(status) is not int or status < 0):
        return None
    return ProviderFault(error_type, kind, message, status)


# --- saved ---

_SIGNED = re.compile(r'\{"signature":"([0-9a-f]{64})","state":')
_SIGNED_PREFIX = len('{"signature":"') + 64 + len('","state":')


def _key(key: Any) -> bytes:
    if not isinstance(key, bytes) or not key:
        raise TypeError(f"'key' must be non-empty bytes (got {type(key).__name__})")
    return key


def _sign(key: bytes, text: str) -> str:
    import hashlib
    import hmac  # signed states only

    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


# The writer, derived from the declarations: each record is read in one C call
# (operator.attrgetter over its attrs fields) and zipped with its field names.
def _writer(cls: type) -> Callable[[Any], dict[str, Any]]:
    names = tuple(f.name for f in attrs.fields(cls))
    values = operator.attrgetter(*names)
    return lambda record: dict(zip(names, values(record), strict=True))


_observation_data = _writer(Observation)
_call_data = _writer(ToolCall)
_judgement_data = _writer(Judgement)
_fault_data = _writer(ProviderFault)
_limits_fields, _usage_fields = _writer(Limits), _writer(Usage)


def _with_amount(data: dict[str, Any], name: str) -> dict[str, Any]:
    if data[name] is not None:  # money as fixed-point text: never a float, never "1E-7" (which the reader refuses)
        data[name] = format(data[name], "f")
    return data


_pause_data = _writer(Pause)
_screen_data = _writer(ScreenRecord)

# The saved fields that hold records, and how each is written; every other field is plain JSON as it stands.
_RECORD_WRITERS: dict[str, Callable[[Any], Any]] = {
    "observations": lambda items: [_observation_data(o) for o in items],
    "pending": lambda items: [_call_data(c) for c in items],
    "judgement": lambda j: None if j is None else _judgement_data(j),
    "fault": lambda f: None if f is None else _fault_data(f),
    "limits": lambda limits: None if limits is None else _with_amount(_limits_fields(limits), "max_cost"),
    "pause": lambda p: None if p is None else _pause_data(p),
    "screens": lambda items: [_screen_data(r) for r in items],
    "prompt": write_prompt,
    "compactions": write_compactions,
    "usage": lambda usage: _with_amount(_usage_fields(usage), "cost"),
    "children": lambda children: {key: _state_data(child) for key, child in children.items()},
}
_WRITTEN_KEYS = ("format", *SAVED_FIELDS)
_saved_values = operator.attrgetter(*SAVED_FIELDS)
_CONVERTED = tuple((i + 1, _RECORD_WRITERS[name]) for i, name in enumerate(SAVED_FIELDS) if name in _RECORD_WRITERS)


def _state_data(s: RunState) -> dict[str, Any]:
    values = [FORMAT, *_saved_values(s)]
    for index, write in _CONVERTED:
        values[index] = write(values[index])
    return dict(zip(_WRITTEN_KEYS, values, strict=True))


_ENCODER = json.JSONEncoder(allow_nan=False)


def dump_state(state: RunState, key: bytes | None) -> str:
    """``state`` as strict JSON, signed when ``key`` is given (see :meth:`RunState.to_json`)."""
    try:
        text = _ENCODER.encode(_state_data(state))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"the run state cannot be saved as strict JSON: {exc}") from exc
    if key is None:
        return text
    return f'{{"signature":"{_sign(_key(key), text)}","state":{text}}}'


# --- the writer of a state committed again and again ---

# One value encoded by a C encoder made once (JSONEncoder.encode makes one per call, which costs more
# than encoding a counter), with _ENCODER's settings: so a field's text is what dump_state writes of it.
# No circularity markers: a cycle ends in RecursionError, refused as any state strict JSON cannot hold.
_make_encoder = getattr(json.encoder, "c_make_encoder", None)
if _make_encoder is not None:
    _one_value = _make_encoder(
        None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, False
    )

    def _encoded(value: Any) -> str:
        return "".join(_one_value(value, 0))

else:  # pragma: no cover - an interpreter without the C accelerator

    def _encoded(value: Any) -> str:
        return _ENCODER.encode(value)


# The fields a bare state is written with (its lists are written apart, once each), and their keys as written.
_BARE_FIELDS = tuple(name for name in SAVED_FIELDS if name not in ("messages", "observations"))
_bare_values = operator.attrgetter(*_BARE_FIELDS)
_BARE_KEYS = tuple(f", {_ENCODER.encode(name)}: " for name in _BARE_FIELDS)
_BARE_CONVERT = tuple(_RECORD_WRITERS.get(name) for name in _BARE_FIELDS)
_BARE_INDICES = range(len(_BARE_FIELDS))
_BARE_HEAD = _ENCODER.encode({"format": FORMAT, "messages": [], "observations": []})[:-1]
# Values whose text cannot change while they are the same object: scalars and frozen records of scalars.
_IMMUTABLE = frozenset(
    {int, str, float, bool, type(None), Judgement, Pause, ProviderFault, Limits, ScreenRecord, Compaction}
)
_usage_values = operator.attrgetter(*(f.name for f in attrs.fields(Usage)))


class _Copy:
    """What a mutable field held when written: a later value holding the very same objects is written the same."""

    __slots__ = ("items", "kind")

    def __init__(self, kind: type, items: tuple[Any, ...]) -> None:
        self.kind, self.items = kind, items

    def holds(self, value: Any) -> bool:
        kind: Any = self.kind
        items = self.items
        if type(value) is not kind:
            return False
        if kind is Usage:
            return all(map(operator.is_, _usage_values(value), items))
        if kind is dict:
            return len(value) == len(items) // 2 and all(map(operator.is_, (*value, *value.values()), items))
        return len(value) == len(items) and all(map(operator.is_, value, items))


_UNTOLD = object()  # a value the writer cannot tell unchanged (it holds something mutable): written every time


def _kept(value: Any) -> Any:
    """What tells, at the next commit, that a field's value is the one just written."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if kind is Usage:
        return _Copy(kind, _usage_values(value))
    if kind is list and _IMMUTABLE.issuperset(map(type, value)):
        return _Copy(kind, tuple(value))
    if kind is dict and _IMMUTABLE.issuperset(map(type, value.values())) and all(type(k) is str for k in value):
        return _Copy(kind, (*value, *value.values()))
    return _UNTOLD


class StateWriter:
    """
    One run's states, committed again and again, written without their lists: each field encoded only when changed.

    A store commits a run's state at every checkpoint, and most of its
    fields are as they were at the commit before (the limits, the run's id,
    the agent and its digest, counters between turns). The writer keeps the
    text of each field as last written and encodes again only a field whose
    value differs: an immutable value that is another object, a list or
    mapping of immutable values whose items are not the very same objects,
    usage whose counts are not. A field that holds what may change in place
    (pending calls with their arguments, typed output, a compacted prompt,
    nested runs) is encoded every time. The text is exactly
    :meth:`RunState.to_json` of the same state with empty ``messages`` and
    ``observations``; :meth:`added` writes the items of those lists apart.

    Keep one writer per run, used by one thread at a time.
    """

    __slots__ = ("_seen", "_texts")

    def __init__(self) -> None:
        seen, texts = _fresh()
        self._seen: list[Any] = list(seen)
        self._texts: list[str] = list(texts)

    def bare(self, state: RunState) -> str:
        """
        ``state`` as strict JSON text with empty ``messages`` and ``observations`` lists.

        Raises:
            ValueError: the state holds something strict JSON cannot (as :meth:`RunState.to_json`).
        """
        seen, texts = self._seen, self._texts
        values = _bare_values(state)
        try:
            # The fields whose value is not the very object last written (found in C), then those of them changed.
            for i in itertools.compress(_BARE_INDICES, map(operator.is_not, values, seen)):
                value, kept = values[i], seen[i]
                if type(kept) is _Copy and kept.holds(value):
                    continue
                convert = _BARE_CONVERT[i]
                texts[i] = _BARE_KEYS[i] + _encoded(value if convert is None else convert(value))
                seen[i] = _kept(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"the run state cannot be saved as strict JSON: {exc}") from exc
        return f"{_BARE_HEAD}{''.join(texts)}}}"

    @staticmethod
    def added(state: RunState, messages: int, observations: int) -> tuple[str, str]:
        """
        The JSON of ``state``'s messages and observations after the first ``messages`` and ``observations``.

        Each list's items as :meth:`RunState.to_json` writes them, comma-joined
        (empty text: nothing added).

        Raises:
            ValueError: an item is not strict JSON (as :meth:`RunState.to_json`).
        """
        try:
            new = _encoded(state.messages[messages:])
            seen = _encoded([_observation_data(o) for o in state.observations[observations:]])
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"the run state cannot be saved as strict JSON: {exc}") from exc
        return new[1:-1], seen[1:-1]


@functools.cache
def _fresh() -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """
    What a writer starts from: the fields of a new state as the engine makes it, already written.

    No answer, no pause, zero counters, empty lists, the default budgets: a
    run's first commit then encodes only the fields that differ (its id, its
    agent, its opening).
    """
    writer = object.__new__(StateWriter)
    writer._seen, writer._texts = [_UNTOLD] * len(_BARE_FIELDS), [""] * len(_BARE_FIELDS)
    writer.bare(RunState(limits=DEFAULT_LIMITS, run_id=""))
    return tuple(writer._seen), tuple(writer._texts)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a strict saved state holds no NaN or Infinity)")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_scan: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def load_state(text: Any, key: bytes | None) -> RunState:
    """Read and check a saved state (see :meth:`RunState.from_json`)."""
    if type(text) is not str:
        if not isinstance(text, (str, bytes, bytearray)):
            raise ValueError(f"a saved run state is JSON text; got {type(text).__name__}")
        if isinstance(text, (bytes, bytearray)):
            text = text.decode("utf-8", errors="replace")
    if key is not None:
        import hmac

        found = _SIGNED.match(text)
        if found is None or not text.endswith("}"):
            raise ValueError("saved run state is not signed (a key was given, so a signature is required)")
        inner = text[_SIGNED_PREFIX:-1]
        if not hmac.compare_digest(found.group(1), _sign(_key(key), inner)):
            raise ValueError("saved run state's signature does not match: it was altered, or signed with another key")
        text = inner
    try:
        data, end = _scan(text, 0)  # the whole text one JSON value, as to_json writes it
    except (StopIteration, ValueError, RecursionError):
        end = -1
    if end != len(text):  # anything else (space around it, not JSON): the decoder decides and words it
        try:
            data = _DECODER.decode(text)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"saved run state is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"not a saved agent_fsm run state: expected a JSON object, got a JSON {json_kind(data)}")
    if "signature" in data and "format" not in data:
        raise ValueError("this saved run state is signed: read it with RunState.from_json(text, key=...)")
    found_format = data.get("format")
    if found_format != FORMAT or type(found_format) is not int:
        raise ValueError(f"not a saved agent_fsm run state (format {FORMAT} expected, got {found_format!r})")
    state = quick_state(data)  # a state as this engine writes it: checked in one pass
    if state is None:  # anything else: the strict reader names the first problem
        try:
            state = read_state(data)
        except BadField as bad:
            raise ValueError(f"saved run state is malformed at {bad.path}: {bad.detail}") from None
    problem = state_problem(state)
    if problem is not None:
        raise ValueError(f"saved run state is inconsistent at {problem[0]}: {problem[1]}")
    return state


# --- at rest ---

# A paused run may wait days for a human, and an application may hold thousands of them (an inbox, a queue of
# approvals). Most of a paused state is its transcript: a dict per message, per tool call and per function,
# each several times the size of its text. At rest the transcript is held pickled (bytes), and the
# containers still empty are not held at all; the state's class is then _Resting, whose descriptors for exactly
# those fields thaw it, in place, on their first use: the same values again, in a plain RunState. Every other
# field (the pause, the pending call, the counters) is read as it stands, without thawing. A live run is never
# at rest, so a turn pays nothing for any of this.

_PACKED = "messages"
# Fields held as None at rest while empty: a new one on thawing, as attrs' default makes it.
_VACANT = ("denials", "recent_rejections", "screens", "compactions", "tool_uses", "children")
_FACTORIES = {f.name: f.default.factory for f in attrs.fields(RunState) if f.name in _VACANT}  # type: ignore[union-attr]
_SLOTS: dict[str, Any] = {name: RunState.__dict__[name] for name in (_PACKED, *_VACANT)}  # their member descriptors
_messages_slot = _SLOTS[_PACKED]
_VACANT_SLOTS = tuple((_SLOTS[name], _FACTORIES[name]) for name in _VACANT)

_THAWING = threading.Lock()


def rest(state: RunState) -> None:
    """
    Let a paused ``state`` (and the runs nested in it) wait compact, in place, until one of its fields is used.

    Its transcript is held pickled and its empty containers are not held (see the banner above); a transcript
    holding anything but builtin values (an enum, an object of the caller's) is kept as it is.
    Reading or writing ``messages`` or an emptied field, comparing, ``repr`` or pickling the state thaws it.
    """
    if type(state) is not RunState:  # at rest already (or a caller's own subclass, left alone)
        return
    for child in state.children.values():
        rest(child)
    packed = _packed(state.messages)
    vacant = [slot for slot, factory in _VACANT_SLOTS if type(value := slot.__get__(state)) is factory and not value]
    if packed is None and not vacant:
        return
    if packed is not None:
        _messages_slot.__set__(state, packed)
    for slot in vacant:
        slot.__set__(state, None)
    state.__class__ = _Resting


def _packed(messages: Any) -> bytes | None:
    """
    The transcript pickled, or None unless it holds only the builtin types pickle copies exactly (str, int, dict...).

    Pickled, not JSON: made without a check in Python per value, and read back with the very types (a tuple stays
    a tuple). Anything else (an enum, a user's object) is refused, so no class is ever reduced or rebuilt. The
    bytes never leave this state: a resting state pickled or saved is thawed first.
    """
    if type(messages) is not list:
        return None
    pickler, make_buffer, protocol = _plain_pickler()
    buffer = make_buffer()
    try:
        pickler(buffer, protocol).dump(messages)
    except Exception:  # refused (_NotPlain), nesting too deep, anything pickle cannot: the transcript stays as it is
        return None
    packed: bytes = buffer.getvalue()
    return packed


@functools.cache
def _plain_pickler() -> Any:
    """The refusing pickler's class, made on the first pause (so ``import agent_fsm`` does not load pickle)."""
    import io
    import pickle

    class Plain(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:  # pickle asks only for what is not an exact builtin
            raise _NotPlain

    return Plain, io.BytesIO, pickle.HIGHEST_PROTOCOL


class _NotPlain(Exception):
    """A value in the transcript is not of a builtin type pickle copies exactly."""


def _thaw(state: RunState) -> None:
    """A resting state as a plain :class:`RunState` again, every value as it was before :func:`rest`."""
    with _THAWING:  # two threads using one resting state thaw it once
        if type(state) is not _Resting:
            return
        for slot, factory in _VACANT_SLOTS:
            try:
                if slot.__get__(state) is None:
                    slot.__set__(state, factory())
            except AttributeError:  # not set yet: a state being built (attrs.evolve of a resting one)
                pass
        try:
            packed = _messages_slot.__get__(state)
        except AttributeError:
            packed = None
        if type(packed) is bytes:
            import pickle

            _messages_slot.__set__(state, pickle.loads(packed))  # bytes rest() made, in this process
        object.__setattr__(state, "__class__", RunState)


def _plain_copy(state: RunState) -> RunState:
    """A plain :class:`RunState` with what a resting ``state`` holds (its transcript unpickled); ``state`` rests on."""
    import pickle

    plain = object.__new__(RunState)
    for name, slot in _FIELD_SLOTS:
        try:
            value = slot.__get__(state)
        except AttributeError:  # not set yet: a state being built
            continue
        if name == _PACKED and type(value) is bytes:
            value = pickle.loads(value)  # bytes rest() made, in this process
        elif value is None and name in _FACTORIES:
            value = _FACTORIES[name]()
        slot.__set__(plain, value)
    return plain


_FIELD_SLOTS = tuple((f.name, RunState.__dict__[f.name]) for f in attrs.fields(RunState))


class _Thawing:
    """A field of a resting state: any use thaws the state, then reads or writes the field's own slot."""

    __slots__ = ("slot",)

    def __init__(self, slot: Any) -> None:
        self.slot = slot

    def __get__(self, state: RunState | None, owner: type | None = None) -> Any:
        if state is None:
            return self
        _thaw(state)
        return self.slot.__get__(state, owner)

    def __set__(self, state: RunState, value: Any) -> None:
        _thaw(state)
        self.slot.__set__(state, value)

    def __delete__(self, state: RunState) -> None:
        _thaw(state)
        self.slot.__delete__(state)


class _Resting(RunState):
    """A :class:`RunState` at rest (see :func:`rest`): the same slots; some fields held compact until used."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        _thaw(self)
        return self == other

    def __repr__(self) -> str:
        # Looked at, not used: a repr (a log line; asyncio's of the finished task that holds the result, which
        # asyncio.run makes on Python 3.11) shows the values and leaves the state at rest.
        return repr(_plain_copy(self))

    def __reduce_ex__(self, protocol: SupportsIndex) -> str | tuple[Any, ...]:
        _thaw(self)
        return self.__reduce_ex__(protocol)


for _name, _slot in _SLOTS.items():
    setattr(_Resting, _name, _Thawing(_slot))


# --- transcript ---


def format_result(result: RunResult, effects: Iterable[Any] | None = None) -> str:
    """Transcript, typed ending, counters and (when given) the effect log."""
    state = result.state
    lines = [format_transcript(state.messages), ""]
    lines.append(
        f"stop={result.stop.value}  turns={state.turns}  tool_attempts={state.tool_attempts}"
        f"  observations={len(state.observations)}"
    )
    if result.code != result.stop.value:
        lines.append(f"code: {result.code}")
    if result.answer is not None:
        lines.append(f"answer: {result.answer}")
    if result.blocked_on is not None:
        lines.append(f"blocked on: {result.blocked_on.name} {json.dumps(result.blocked_on.arguments)}")
    if state.fault is not None:
        lines.append(f"provider fault: {state.fault.type} ({state.fault.kind}): {state.fault.message}")
    if effects is not None:
        lines.append(f"effect log: {json.dumps(list(effects))}")
    return "\n".join(lines)


def _quick_reader_covers_the_state() -> bool:
    """Whether the fast reader sets every saved field: a field it forgot would leave a slot empty or wrong."""
    sample = RunState(
        turns=1, code="checked", agent="a", agent_digest="d", elapsed=0.5, finish="stop", prompt=[],
        output={"a": [1]}, output_rejections=1,
    )  # fmt: skip
    sample.screens.append(ScreenRecord("input", None, "pass"))
    sample.usage, sample.tool_uses, sample.model_attempt = Usage(3, 2, 1, Decimal("0.5")), {"t": 1}, 1
    sample.children["c"] = RunState(run_id=f"{sample.run_id}/c", answer="nested")
    data = json.loads(dump_state(sample, None))
    try:
        return quick_state(data) == sample
    except AttributeError:  # a slot left unset
        return False


ENABLED = ENABLED and _quick_reader_covers_the_state()
