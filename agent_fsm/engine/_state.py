"""
The run's state as plain data, and the result a run returns: the records and their documented invariants.

Nothing about a run lives anywhere else: save a :class:`RunState` as JSON,
load it in another process, and resume carries on exactly as in memory. A
saved state is data that may have been edited, truncated or forged, so it
is read without coercion and its counters are checked against its
transcript (:func:`state_problem`) before anything is decided from it;
whether it is *authentic* only a signature (``key=``) can tell, and the
driver never takes authority from a state either way (docs/security.md).

Each field declares beside itself how it is saved and checked
(``metadata=codec(...)``). The saved form (writer, strict and fast readers,
signature) is derived from those declarations by
:mod:`agent_fsm.engine._saved`, a module below this one that never imports
it: this module hands it :class:`RunState` at import (as ``attrs`` is handed
a class), and :meth:`RunState.to_json` / :meth:`RunState.from_json` delegate
to the form built, an import downwards. So adding a saved field is one line
here. The compact form a paused state rests in is
:mod:`agent_fsm.engine._resting`, above this module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import attrs

from agent_fsm.engine._codecs import (
    CODE,
    COMPACTIONS,
    COUNT,
    COUNTS_BY_NAME,
    FLAG,
    JSON_VALUE,
    LIMITS,
    MACHINE_STATE,
    MAYBE_TEXT,
    MESSAGES,
    NESTED,
    OBSERVATIONS,
    PATH,
    PENDING,
    PROMPT,
    RECENT,
    SECONDS,
    SIZES,
    STATES,
    TEXT,
    USAGE,
    WHOLE,
    codec,
    fault,
    judgement,
    pause,
    screens,
)
from agent_fsm.engine._context import Compaction, PromptEntry, prompt_problem
from agent_fsm.engine._limits import DEFAULT_LIMITS, Limits, Stop, Usage
from agent_fsm.engine._machine import RUN_MACHINE
from agent_fsm.engine._messages import INVALID_OUTPUT_HEAD, Observation
from agent_fsm.engine._saved import FieldWriter, SavedForm
from agent_fsm.engine._tools import ToolCall, call_fingerprint

__all__ = [
    "GROWING",
    "Judgement",
    "Pause",
    "ProviderFault",
    "RunResult",
    "RunState",
    "SAVED",
    "STATES",
    "ScreenRecord",
    "StateWriter",
    "blocked_call",
    "executed_calls",
    "nested_nonce",
    "new_nonce",
    "state_problem",
]


# --- state ---


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


def new_nonce() -> str:
    """A run's nonce: 16 random bytes as hex (see :attr:`RunState.nonce`)."""
    return os.urandom(16).hex()


def nested_nonce(parent: str, call_id: str) -> str:
    """
    The nonce of the run nested by call ``call_id`` in a run whose nonce is ``parent``.

    Derived, not drawn: a replay of the parent (a Temporal worker taking a
    workflow over) nests the same run under the same keys. A parent saved
    before nonces (``""``) nests runs keyed as they were then.
    """
    if not parent:
        return ""
    import hashlib

    return hashlib.sha256(f"{parent}\x00{call_id}".encode()).hexdigest()[:32]


# The counts of a state saved before RunState.repeats: one empty dict, never filled (see count_result).
_NO_REPEATS: dict[str, int] = {}


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

    messages: list[dict[str, Any]] = attrs.field(factory=list, metadata=codec(MESSAGES, grows=True, rests="packed"))
    observations: list[Observation] = attrs.field(factory=list, metadata=codec(OBSERVATIONS, grows=True))
    prompt_token_log: list[int] = attrs.field(factory=list, metadata=codec(SIZES, grows=True))
    turns: int = attrs.field(default=0, metadata=codec(COUNT))
    tool_attempts: int = attrs.field(default=0, metadata=codec(COUNT))
    machine_state: str = attrs.field(default="Ready", metadata=codec(MACHINE_STATE))
    # Every state the run entered, in order: the trace that diagrams and
    # reviews read, so nothing about the route has to be inferred.
    path: list[str] = attrs.field(factory=list, metadata=codec(PATH, grows=True))
    pending: list[ToolCall] = attrs.field(factory=list, metadata=codec(PENDING))
    judgement: Judgement | None = attrs.field(default=None, metadata=codec(judgement(Judgement)))
    denials: dict[str, int] = attrs.field(factory=dict, metadata=codec(COUNTS_BY_NAME, rests="vacant"))
    answer: str | None = attrs.field(default=None, metadata=codec(MAYBE_TEXT))
    # How many messages the run started with (system prompt, history, task):
    # what came before is a conversation's past, not this run's record.
    opening: int = attrs.field(default=0, metadata=codec(COUNT))
    fault: ProviderFault | None = attrs.field(default=None, metadata=codec(fault(ProviderFault)))
    # Estimated tokens of ``messages``, kept as messages are appended so each
    # is measured once; ``usage_offset`` corrects it with a provider's count.
    message_tokens: int = attrs.field(default=0, metadata=codec(COUNT))
    usage_offset: int = attrs.field(default=0, metadata=codec(WHOLE))
    # How the latest model reply ended, as its adapter reported it
    # (``ModelReply.finish``: "stop", "length", "refusal", ...), else None.
    finish: str | None = attrs.field(default=None, metadata=codec(MAYBE_TEXT))
    # The world's own ending (agent_fsm.Ending), once the run rests on one; kept here so it survives a save.
    code: str | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.matches_re(r"[a-z][a-z0-9_]{0,63}")),
        metadata=codec(CODE),
    )
    # Set while the run rests in ``AwaitingApproval``: unique to this pause,
    # so a decision names the pause it decides and is applied once.
    pause_id: str | None = attrs.field(default=None, metadata=codec(MAYBE_TEXT))
    # The budgets the run was started (or last resumed) under: a resume
    # without ``limits=`` keeps them, so a run cannot outgrow its budgets by
    # being saved and loaded.
    limits: Limits | None = attrs.field(default=None, metadata=codec(LIMITS))
    # The open pause (set while ``AwaitingApproval``), and the run's identity
    # that makes each pause id unique across runs.
    pause: Pause | None = attrs.field(default=None, metadata=codec(pause(Pause)))
    run_id: str = attrs.field(factory=_new_run_id, metadata=codec(TEXT))
    # Set on a paused state once resume() has used it: a state object is
    # decided once. (The same saved JSON loaded twice is two objects; see
    # resume(seen=...) and docs/security.md.)
    consumed: bool = attrs.field(default=False, metadata=codec(FLAG))
    # No-progress bookkeeping, O(1) per rejection: the fingerprints of the
    # last two rejected proposals, and how many consecutive rejections so far
    # alternated between two different proposals (A, B, A, B ...).
    recent_rejections: list[str] = attrs.field(factory=list, metadata=codec(RECENT, rests="vacant"))
    alternation: int = attrs.field(default=0, metadata=codec(COUNT))
    # Seconds spent in the drivers under a time budget (Limits.max_seconds), pauses excluded.
    elapsed: float = attrs.field(default=0.0, metadata=codec(SECONDS, added=True))
    # The agent the run belongs to: its name and the digest of its tool contracts
    # (Agent.digest), so a store, the inbox and the CLI can say when a run is
    # decided by another agent than the one that ran it. Information, never authority.
    agent: str | None = attrs.field(default=None, metadata=codec(MAYBE_TEXT, added=True))
    agent_digest: str | None = attrs.field(default=None, metadata=codec(MAYBE_TEXT, added=True))
    # Every input and result screen's verdict, in order (see agent_fsm.Agent's screen_input and screen_result).
    screens: list[ScreenRecord] = attrs.field(
        factory=list, metadata=codec(screens(ScreenRecord), added=True, grows=True, rests="vacant")
    )
    # The prompt when it differs from the transcript (after a compaction): transcript indices and
    # stand-ins (agent_fsm.engine._context); None: the prompt is the transcript. And each compaction made.
    prompt: list[PromptEntry] | None = attrs.field(default=None, metadata=codec(PROMPT, added=True))
    compactions: list[Compaction] = attrs.field(
        factory=list, metadata=codec(COMPACTIONS, added=True, grows=True, rests="vacant")
    )
    # Typed output (Agent(output=...)): the accepted answer as validated JSON (set only in Answered),
    # and how many invalid answers went back to the model (at most Limits.output_retries).
    output: Any = attrs.field(default=None, metadata=codec(JSON_VALUE, added=True))
    output_rejections: int = attrs.field(default=0, metadata=codec(COUNT, added=True))
    # What the run spent (tokens in and out, money under a price table), how many
    # calls each tool with a max_calls cap executed, and which model of a
    # FallbackModel's chain the current turn is on (0: the primary).
    usage: Usage = attrs.field(factory=Usage, metadata=codec(USAGE, added=True))
    tool_uses: dict[str, int] = attrs.field(factory=dict, metadata=codec(COUNTS_BY_NAME, added=True, rests="vacant"))
    model_attempt: int = attrs.field(default=0, metadata=codec(COUNT, added=True))
    # The runs of other agents this run nested (an agent as a tool, a handoff), by the call that ran each:
    # whole states of their own, saved within this one. The one under the head pending call may be in flight.
    children: dict[str, RunState] = attrs.field(factory=dict, metadata=codec(NESTED, added=True, rests="vacant"))
    # Random, fixed when the run is begun: it enters every idempotency key, so one run id in two databases (or
    # reused) never shares a key. A fork gets its own. "": a state saved before it, whose keys stay as they were.
    nonce: str = attrs.field(factory=lambda: new_nonce(), metadata=codec(TEXT, added=True, legacy=""))
    # How many times each allowed call (name, canonical arguments) returned each result, by a digest of
    # the two: O(1) per executed call, so a model asking what it was told ends no_progress (Limits.repeated_results).
    # Empty, it is left out of the saved text (a state saved before it reads back the same), and shared: the
    # engine puts a fresh dict in place of an empty one before its first count.
    repeats: dict[str, int] = attrs.field(
        factory=dict, metadata=codec(COUNTS_BY_NAME, added=True, legacy=_NO_REPEATS, rests="vacant")
    )

    def to_json(self, *, key: bytes | None = None) -> str:
        """
        This state as strict JSON text (lossless: ``from_json(s.to_json()) == s``).

        With ``key``, the text is signed (HMAC-SHA256) and :meth:`from_json`
        must be given the same key: use it whenever the state travels through
        hands that are not yours (a browser, a queue, a ticket system).

        Raises:
            ValueError: the state holds something strict JSON cannot (NaN, a non-JSON object, too deep).
        """
        return SAVED.dump(self, key)

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
        return SAVED.load(text, key)  # type: ignore[no-any-return]

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

_COUNTERS = ("turns", "tool_attempts", "opening", "message_tokens", "alternation")


def state_problem(state: RunState) -> tuple[str, str] | None:
    """
    The first way ``state`` disagrees with itself, as ``(dotted path, what is wrong)``; ``None`` if consistent.

    Checked: counters are whole numbers >= 0; one logged prompt per turn; no
    more assistant replies than turns and no fewer handler attempts than
    executed calls; observations answer this run's tool messages one to one;
    every pending call was proposed by the latest reply, is unanswered and
    carries the reply's text; a pause exactly while awaiting approval, bound
    to the blocked call; no fewer calls of a counted tool (``tool_uses``) than
    the transcript shows executed, and no fewer invalid typed answers
    (``output_rejections``) than it shows sent back: an edited state never
    gets a tool's cap or the output retries back. (A counted tool whose
    count was removed is refused by the agent that caps it.)
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
    sent_back = 0  # invalid typed answers sent back to the model
    for message in messages[opening:] if opening else messages:
        role = message.get("role")
        if role == "assistant":
            replies += 1
            last_reply = message
            since_reply = 0
        elif role == "tool":
            answered.append(message.get("tool_call_id"))
            since_reply += 1
        elif role == "user":
            content = message.get("content")
            sent_back += type(content) is str and content.startswith(INVALID_OUTPUT_HEAD)
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
    if state.pending and state.machine_state == "Cancelled":
        return "pending", "a cancelled run answers every call it waited on as not run; calls are still pending"
    if state.output is not None and state.machine_state != "Answered":
        return "output", f"typed output is recorded but the run is in {state.machine_state!r}"
    if type(state.output_rejections) is not int or state.output_rejections < 0:
        return "output_rejections", f"expected a whole number >= 0, got {state.output_rejections!r}"
    if state.output_rejections < sent_back:  # fewer would give the model its typed-output retries back
        return "output_rejections", f"{state.output_rejections} recorded but {sent_back} answers were sent back"
    if state.tool_uses:
        ran = executed_calls(state)
        for name, count in state.tool_uses.items():
            if count < ran.get(name, 0):  # fewer would give a capped tool its calls back
                return f"tool_uses.{name}", f"{count} recorded but the transcript shows {ran[name]} executed"
    if not paused and state.pause is not None:
        return "pause", f"a pause is recorded but the run is in {state.machine_state!r}"
    if state.pause is not None and state.pause.fingerprint != call_fingerprint(state.pending[0]):
        return "pause.fingerprint", "does not match the blocked call (the call or the pause was edited)"
    if state.repeats and sum(state.repeats.values()) > executed:
        return "repeats", f"{sum(state.repeats.values())} results counted but {executed} calls were executed"
    if state.prompt is not None:
        wrong = prompt_problem(messages, state.prompt, opening)
        if wrong is not None:
            return "prompt", wrong
    if state.children:
        return _children_problem(state)
    return None


def executed_calls(state: RunState) -> dict[str, int]:
    """
    How many calls of each tool this run executed (a ``result`` or ``error`` observation), read from its transcript.

    Each observation answers the call of that id in the latest reply before its tool message (a model may
    reuse ids across turns). Expects a state whose observations answer its tool messages (:func:`state_problem`).
    """
    names: list[Any] = []
    proposed: dict[Any, Any] = {}
    for message in state.messages[state.opening :]:
        role = message.get("role")
        if role == "assistant":
            calls = message.get("tool_calls")
            proposed = {
                c.get("id"): (c.get("function") or {}).get("name")
                for c in (calls if isinstance(calls, list) else ())
                if isinstance(c, dict) and isinstance(c.get("function") or {}, dict)
            }
        elif role == "tool":
            names.append(proposed.get(message.get("tool_call_id")))
    counts: dict[str, int] = {}
    for observation, name in zip(state.observations, names, strict=False):
        if observation.kind in ("result", "error") and isinstance(name, str):
            counts[name] = counts.get(name, 0) + 1
    return counts


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


# --- the saved form ---

SAVED = SavedForm(RunState, state_problem, lambda: RunState(limits=DEFAULT_LIMITS, run_id="", nonce=""))
"""The saved form of :class:`RunState`, derived from its fields' declarations."""

GROWING = tuple(name for name, kind in SAVED.codecs.items() if kind.grows)
"""The fields declared ``grows`` (lists the engine appends to), in the saved order: a store writes what each added."""


class StateWriter(FieldWriter):
    """A run's states committed again and again (see :class:`~agent_fsm.engine._saved.FieldWriter`)."""

    __slots__ = ()

    def __init__(self) -> None:
        FieldWriter.__init__(self, SAVED)

    if TYPE_CHECKING:  # the base's, at run time: no call more per commit

        def added(self, state: Any, *since: int) -> tuple[str, ...]:
            """The JSON of the items of each of :data:`GROWING` after the first ``since`` (see the base class)."""


def _sample() -> RunState:
    """A state with a value in every field a default leaves empty: the fast reader must read it back equal."""
    sample = RunState(
        turns=1, code="checked", agent="a", agent_digest="d", elapsed=0.5, finish="stop", prompt=[],
        output={"a": [1]}, output_rejections=1,
    )  # fmt: skip
    sample.screens.append(ScreenRecord("input", None, "pass"))
    sample.usage, sample.tool_uses, sample.model_attempt = Usage(3, 2, 1, Decimal("0.5")), {"t": 1}, 1
    sample.repeats = {"r": 2}
    sample.children["c"] = RunState(run_id=f"{sample.run_id}/c", answer="nested")
    return sample


if not SAVED.covers(_sample()):  # pragma: no cover - a declaration the fast reader cannot take
    raise RuntimeError("the fast reader does not read back every field of RunState as written")
