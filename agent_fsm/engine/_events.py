"""
Run events: what a run did, as it did it, as plain data.

The drivers post these as the run moves (``on_event=``, :func:`agent_fsm.stream`,
:func:`agent_fsm.astream`). Every event is a frozen attrs record with the
run's id and the wall-clock time it happened (``at``, seconds since the
epoch), and survives a JSON round trip (:func:`event_to_json`,
:func:`event_from_json`), so it can be shipped to a UI or a log as it is.
Events are made only when someone listens: a run without a listener pays
nothing for them.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import attrs

from agent_fsm.engine._context import Compaction
from agent_fsm.engine._limits import Stop
from agent_fsm.engine._state import RunResult, RunState, blocked_call

__all__ = [
    "EVENT_TYPES",
    "AnswerHold",
    "AnswerWithheld",
    "Compacted",
    "Charged",
    "Ended",
    "FellBack",
    "Judged",
    "ModelReplied",
    "ModelRequested",
    "Observed",
    "RateWaited",
    "Paused",
    "Proposed",
    "RunEvent",
    "Screened",
    "StateEntered",
    "TextDelta",
    "ToolProgress",
    "ToolsOffered",
    "event_from_json",
    "event_to_json",
]


# --- events ---


@attrs.frozen
class RunEvent:
    """The fields every event has: the run it belongs to and when it happened."""

    type: ClassVar[str] = "event"
    run_id: str
    at: float

    # Every event class shares these three (each is declared repr=False, eq=False) instead of attrs generating
    # its own: compiling them was two thirds of building an event class, paid by every import of the engine.
    # They read and compare what attrs' own would: the fields, in order, of events of the same class.

    def __repr__(self) -> str:
        values = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in attrs.fields(type(self)))
        return f"{type(self).__qualname__}({values})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in attrs.fields(type(self)))

    def __hash__(self) -> int:
        return hash((self.type, *(getattr(self, f.name) for f in attrs.fields(type(self)))))


@attrs.frozen(repr=False, eq=False)
class StateEntered(RunEvent):
    """The run entered ``state`` from ``source`` by ``event``, the first edge whose ``guard`` held (``None``: else)."""

    type: ClassVar[str] = "state_entered"
    state: str
    source: str
    event: str
    guard: str | None
    turn: int


@attrs.frozen(repr=False, eq=False)
class ModelRequested(RunEvent):
    """Model call number ``turn`` is being made: a prompt estimated at ``prompt_tokens``, of ``messages`` messages."""

    type: ClassVar[str] = "model_requested"
    turn: int
    prompt_tokens: int
    messages: int


@attrs.frozen(repr=False, eq=False)
class ModelReplied(RunEvent):
    """
    The model replied: ``prompt_tokens`` as counted (the provider's figure when adopted),
    how the reply ended (``finish``), how many calls it proposed and its text.
    """

    type: ClassVar[str] = "model_replied"
    turn: int
    prompt_tokens: int
    finish: str | None
    calls: int
    text: str | None


@attrs.frozen(repr=False, eq=False)
class Charged(RunEvent):
    """
    Model call ``turn`` was charged: the tokens it took in (``cached_tokens`` of them from a cache) and
    gave out, the provider's figures where it reported them, else estimates; its ``cost`` and the run's
    ``total`` so far as decimal text (``"0"`` without prices), and the ``model`` it was priced as.
    """

    type: ClassVar[str] = "charged"
    turn: int
    model: str | None
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost: str
    total: str


@attrs.frozen(repr=False, eq=False)
class FellBack(RunEvent):
    """Model ``attempt`` of a FallbackModel's chain failed with a listed ``kind``: the next one is asked."""

    type: ClassVar[str] = "fell_back"
    turn: int
    attempt: int
    kind: str
    message: str


@attrs.frozen(repr=False, eq=False)
class RateWaited(RunEvent):
    """
    Model call ``turn`` waited ``seconds`` for its model's rate limit before it was made.

    ``cut``: the wait would have passed the run's time budget, so the run
    waited out what was left of it and ends ``time_limit`` without the call.
    """

    type: ClassVar[str] = "rate_waited"
    turn: int
    seconds: float
    cut: bool


@attrs.frozen(repr=False, eq=False)
class TextDelta(RunEvent):
    """A fragment of the reply text of model call ``turn``, from a streaming model, as it arrived."""

    type: ClassVar[str] = "text_delta"
    turn: int
    text: str


@attrs.frozen(repr=False, eq=False)
class AnswerWithheld(RunEvent):
    """
    The text of model call ``turn``, held back (``hold_answer=True``), is not released: it was not accepted.

    The run went to ``state`` instead (``OutputInvalid``: the typed output
    failed; ``AnswerRejected``: the answer check refused it; a budget's
    stop); ``retrying``: the model is asked again, so another answer is coming.
    """

    type: ClassVar[str] = "answer_withheld"
    turn: int
    state: str
    retrying: bool


@attrs.frozen(repr=False, eq=False)
class Proposed(RunEvent):
    """The call the run is about to judge (``arguments`` is ``None`` when they did not parse)."""

    type: ClassVar[str] = "proposed"
    call_id: str
    name: str
    arguments: Any


@attrs.frozen(repr=False, eq=False)
class Judged(RunEvent):
    """
    The judgement of a proposal: ``invalid`` (its contract; the gate was not asked), else the gate's
    verdict as ``allow``, ``denied`` or ``ask``, with the reason.
    """

    type: ClassVar[str] = "judged"
    call_id: str
    name: str
    kind: str
    reason: str


@attrs.frozen(repr=False, eq=False)
class Observed(RunEvent):
    """What came back for a call: a result, an error, or the rejection sent to the model."""

    type: ClassVar[str] = "observed"
    call_id: str
    name: str
    ok: bool
    kind: str
    content: Any


@attrs.frozen(repr=False, eq=False)
class ToolProgress(RunEvent):
    """
    A running handler said how far its call ``call_id`` has come (:meth:`agent_fsm.ToolContext.progress`).

    ``progress`` grows with the work; ``total`` is where it ends, when known;
    ``message`` (at most :data:`agent_fsm.engine.MAX_PROGRESS_MESSAGE` characters) says what is being done.
    """

    type: ClassVar[str] = "tool_progress"
    call_id: str
    name: str
    progress: float
    total: float | None
    message: str | None


@attrs.frozen(repr=False, eq=False)
class Screened(RunEvent):
    """
    A screen's verdict: on the task (``stage`` ``input``) or on the observation answering ``call_id``
    (``result``); ``action`` ``pass``, ``redact`` or ``stop``, with the screen's code and reason.
    """

    type: ClassVar[str] = "screened"
    stage: str
    call_id: str | None
    action: str
    code: str | None
    reason: str


@attrs.frozen(repr=False, eq=False)
class Paused(RunEvent):
    """The run paused on ``pause_id`` for a human's decision about the call ``call_id``."""

    type: ClassVar[str] = "paused"
    pause_id: str
    call_id: str
    name: str
    reason: str


@attrs.frozen(repr=False, eq=False)
class Compacted(RunEvent):
    """
    Before model call ``turn`` the prompt was compacted by ``strategy`` from ``tokens_before`` to ``tokens_after``.

    ``elided`` and ``dropped`` count the transcript messages newly sent as a
    stand-in and newly left out (``RunState.compactions`` names them).
    """

    type: ClassVar[str] = "compacted"
    turn: int
    strategy: str
    tokens_before: int
    tokens_after: int
    elided: int
    dropped: int

    @classmethod
    def of(cls, run_id: str, at: float, record: Compaction) -> Compacted:
        """The event of one compaction record."""
        r = record
        return cls(run_id, at, r.turn, r.strategy, r.tokens_before, r.tokens_after, len(r.elided), len(r.dropped))


@attrs.frozen(repr=False, eq=False)
class ToolsOffered(RunEvent):
    """Model call ``turn`` offers the tools ``names`` (only posted when the agent offers tools per turn)."""

    type: ClassVar[str] = "tools_offered"
    turn: int
    names: list[str]


@attrs.frozen(repr=False, eq=False)
class Ended(RunEvent):
    """The run rests (ended, or paused for a human): the :class:`agent_fsm.RunResult` the driver returns."""

    type: ClassVar[str] = "ended"
    result: RunResult


_EVENT_CLASSES = (
    StateEntered,
    ModelRequested,
    RateWaited,
    ModelReplied,
    TextDelta,
    Proposed,
    Judged,
    ToolProgress,
    Observed,
    Screened,
    Paused,
    Compacted,
    ToolsOffered,
    Charged,
    FellBack,
    AnswerWithheld,
)
EVENT_TYPES: dict[str, type[RunEvent]] = {cls.type: cls for cls in (*_EVENT_CLASSES, Ended)}
"""Every event class by its ``type`` name, as :func:`event_to_json` writes it."""


_RETRIED_FROM = frozenset({"OutputInvalid", "Proposing"})  # the reply failed and the model is asked again


class AnswerHold:
    """
    Holds back a run's answer text until the run accepts it: what ``stream(..., hold_answer=True)`` delivers.

    A reply's text deltas (and its ``ModelReplied``, which carries the text)
    are held from its first delta. A reply proposing calls is no answer: what
    was held goes out at once, and its calls stream as ever. A reply with no
    calls is held until the machine leaves ``Proposing``: into ``Answered``
    (after the answer check and the typed output accepted it) everything
    held goes out; anywhere else the deltas are dropped, the ``ModelReplied``
    goes out without its text, and an :class:`AnswerWithheld` says so. Only
    the run ``run_id``'s own replies are held (a nested run's answer is its
    parent's tool result). One object per stream; the sync and async streams
    feed it alike.
    """

    __slots__ = ("held", "run_id")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.held: list[RunEvent] | None = None

    def feed(self, event: RunEvent) -> list[RunEvent]:
        """The events to deliver now that ``event`` arrived (none while it is held)."""
        held = self.held
        if event.run_id != self.run_id:
            return [event]
        if held is None:
            if type(event) is TextDelta or (type(event) is ModelReplied and event.calls == 0):
                self.held = [event]
                return []
            return [event]
        if type(event) is ModelReplied and event.calls:
            self.held = None  # the text came with calls: no answer to wait for
            return [*held, event]
        if type(event) is not StateEntered or event.source != "Proposing":
            held.append(event)
            return []
        self.held = None
        if event.state == "Answered":
            return [*held, event]
        kept = [attrs.evolve(e, text=None) if type(e) is ModelReplied else e for e in held if type(e) is not TextDelta]
        withheld = AnswerWithheld(event.run_id, event.at, event.turn, event.state, event.state in _RETRIED_FROM)
        return [*kept, withheld, event]


def event_to_json(event: RunEvent) -> dict[str, Any]:
    """``event`` as a JSON object (``type`` names its class; an ``Ended`` carries the state as saved JSON)."""
    data: dict[str, Any] = {"type": event.type}
    for field in attrs.fields(type(event)):
        value = getattr(event, field.name)
        if isinstance(value, RunResult):
            value = {
                "stop": value.stop.value,
                "code": value.code,
                "answer": value.answer,
                "reason": value.reason,
                "state": json.loads(value.state.to_json()),
            }
        data[field.name] = value
    return data


def event_from_json(data: dict[str, Any]) -> RunEvent:
    """
    The event :func:`event_to_json` wrote.

    Raises:
        ValueError: not an event of a known type, or its fields do not fit it.
    """
    cls = EVENT_TYPES.get(str(data.get("type"))) if isinstance(data, dict) else None
    if cls is None:
        raise ValueError(f"not a run event: {data!r:.200}")
    fields = {k: v for k, v in data.items() if k != "type"}
    if cls is Ended:
        fields["result"] = _result(fields.get("result"))
    try:
        return cls(**fields)
    except TypeError as exc:
        raise ValueError(f"a {cls.type!r} event with the wrong fields: {exc}") from None


def _result(data: Any) -> RunResult:
    if not isinstance(data, dict) or set(data) != {"stop", "code", "answer", "reason", "state"}:
        raise ValueError(f"an 'ended' event's result must hold stop, code, answer, reason and state: {data!r:.200}")
    state = RunState.from_json(json.dumps(data["state"]))
    stop = Stop(data["stop"])
    blocked, path = blocked_call(state) if stop is Stop.AWAITING_APPROVAL and state.pending else (None, ())
    return RunResult(
        stop=stop,
        answer=data["answer"],
        state=state,
        blocked_on=blocked,
        reason=data["reason"],
        code=data["code"],
        blocked_path=path,
    )
