"""
A run's kept events: what the store's records say happened, numbered by checkpoint, the same in every process.

The plain API's event stream is made of these. Each is derived from what the
store already records (the messages and observations each checkpoint added,
the decision taken on each pause, the run's rest, a bug that stopped it), so
any ``serve`` process on the store, or the same one after a restart, can say
it again with the same id: ``P.I``, the ``I``-th event (from 0) of the
stretch of the run that checkpoint ``P`` closes. A process driving the run
derives the same events from the run's state as it goes (:class:`Tracker`),
before the checkpoint is committed, so a client sees them as they happen and
can go on from any of them anywhere.

A stretch not yet committed when its process dies is driven again from its
checkpoint by whichever process takes the run over; its events are numbered
again from that checkpoint, so a client resuming inside it gets those after
the one it had.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs

from agent_fsm import Agent
from agent_fsm.engine import Ended, Intent, Observation, RunEvent, RunResult, RunState
from agent_fsm.store import RunNotFound
from agent_fsm.store.protocol import RunStore
from agent_fsm.store.records import Decision, StoredRun

__all__ = ["EventId", "Kept", "Opening", "Tracker", "Watched", "event_id", "opening", "result_data", "stored_events"]

EventId = tuple[int, int]
"""A kept event's place: the checkpoint closing its stretch, its index in the stretch."""

RESTING = frozenset({"ended", "failed"})


def result_data(result: RunResult) -> dict[str, Any]:
    """A rest as the API says it: the stop, its code, the answer or the reason, the open pause if any."""
    pause = result.state.pause_id if result.stop.value == "awaiting_approval" else None
    return {
        "stop": result.stop.value,
        "code": result.code,
        "answer": result.answer,
        "reason": result.reason,
        "pause_id": pause,
    }


@attrs.frozen
class Kept:
    """One kept event: its place and its JSON data (``type`` names it)."""

    id: EventId
    data: dict[str, Any]

    @property
    def rests(self) -> bool:
        """Whether the run rests after this event (ended, paused, or stopped by a bug)."""
        return self.data["type"] in RESTING

    @property
    def text_id(self) -> str:
        """The id as SSE sends it: ``P.I``."""
        return f"{self.id[0]}.{self.id[1]}"


def event_id(text: str) -> EventId | None:
    """The place an SSE ``Last-Event-ID`` names (``P.I``; ``0``: nothing seen), or ``None`` if it names none."""
    if text == "0":
        return (0, -1)
    point, dot, index = text.partition(".")
    if not dot or not point.isdigit() or not index.isdigit() or len(text) > 40:
        return None
    return (int(point), int(index))


def _arguments(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except (ValueError, RecursionError):
        return text  # malformed arguments, as the model sent them


def _observed(run_id: str, messages: list[dict[str, Any]], at: int, observation: Observation) -> dict[str, Any]:
    name = next(
        (
            call.get("function", {}).get("name")
            for message in reversed(messages[:at])
            for call in message.get("tool_calls") or ()
            if call.get("id") == observation.call_id
        ),
        None,
    )
    return {
        "type": "observed",
        "run_id": run_id,
        "call_id": observation.call_id,
        "name": name,
        "ok": observation.ok,
        "kind": observation.kind,
        "content": json.loads(json.dumps(observation.content, default=repr)),
    }


def transcript_events(run_id: str, state: RunState, start: int) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """
    The events of ``state``'s messages from ``start``: a reply and its calls, each call's observation.

    Returns each with the index of the message it comes from, and the index
    of the first message not read: a tool's message whose observation is
    not yet in the state is read later.
    """
    messages = state.messages
    found: list[tuple[int, dict[str, Any]]] = []
    at = start
    while at < len(messages):
        message = messages[at]
        role = message.get("role")
        if role == "assistant":
            calls = message.get("tool_calls") or []
            found.append(
                (at, {"type": "model_replied", "run_id": run_id, "text": message.get("content"), "calls": len(calls)})
            )
            for call in calls:
                function = call.get("function", {})
                proposed = {
                    "type": "proposed",
                    "run_id": run_id,
                    "call_id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": _arguments(function.get("arguments")),
                }
                found.append((at, proposed))
        elif role == "tool":
            observed = _observation(state, at)
            if observed is None:
                break  # its observation is not in the state yet
            found.append((at, _observed(run_id, messages, at, observed)))
        at += 1
    return found, at


def _observation(state: RunState, at: int) -> Observation | None:
    """The observation the tool message ``at`` reports: its call's, the n-th if the call id came n times."""
    call_id = state.messages[at].get("tool_call_id", "")
    nth = sum(1 for m in state.messages[:at] if m.get("role") == "tool" and m.get("tool_call_id", "") == call_id)
    kept = [o for o in state.observations if o.call_id == call_id]
    return kept[nth] if nth < len(kept) else None


def rest_events(run_id: str, result: RunResult) -> list[dict[str, Any]]:
    """The events of a rest: the pause's (what it waits on) if paused, then the ending."""
    found = []
    if result.stop.value == "awaiting_approval" and result.blocked_on is not None:
        call = result.blocked_on
        found.append(
            {
                "type": "paused",
                "run_id": run_id,
                "pause_id": result.state.pause_id,
                "call_id": call.call_id,
                "name": call.name,
                "reason": result.reason,
            }
        )
    return [*found, {"type": "ended", "run_id": run_id, **result_data(result)}]


def decided_event(decision: Decision) -> dict[str, Any]:
    """A person's decision on a pause, as recorded."""
    return {
        "type": "decided",
        "run_id": decision.run_id,
        "pause_id": decision.pause_id,
        "decision": decision.decision,
        "reviewer": decision.reviewer,
        "reason": decision.reason,
        "arguments": decision.arguments,
    }


def failed_event(run_id: str, error: str | None) -> dict[str, Any]:
    """A bug stopped the run: the error the store recorded."""
    return {"type": "failed", "run_id": run_id, "error": error}


def _decision_on(store: RunStore, run_id: str, pause_id: str | None) -> Decision | None:
    if pause_id is None:
        return None
    return next((d for d in store.history(run_id) if d.pause_id == pause_id), None)


def _result(agent: Agent, state: RunState) -> RunResult:
    """The result of a stored rest as ``agent`` reports it (a resting state goes nowhere: nothing is written)."""
    return agent.advance(state)


@attrs.frozen
class Opening:
    """Where a process taking up a stored run starts its own events: after checkpoint ``point``."""

    point: int
    message: int  # the first message after that checkpoint
    index: int  # the index of the stretch's first event not derived from the store (after a decision: 1)


def opening(store: RunStore, run_id: str) -> Opening:
    """Where the events of the run, taken up now from its latest checkpoint, begin (blocking)."""
    points = store.checkpoints(run_id)
    if not points:
        raise RunNotFound(f"run {run_id!r} has no checkpoints kept")
    last = points[-1]
    state = store.checkpoint(run_id, last.point)
    paused = last.stop == "awaiting_approval"
    decided = paused and _decision_on(store, run_id, state.pause_id) is not None
    return Opening(last.point, len(state.messages), 1 if decided else 0)


def stored_events(
    store: RunStore, run_id: str, agent_for: Callable[[RunState], Agent], after: EventId
) -> tuple[list[Kept], bool]:
    """
    The run's kept events after ``after``, as the store records them, and whether the run rests after the last.

    Blocking: call it from a thread. Only the checkpoints from the stretch of
    ``after`` on are read.
    """
    points = store.checkpoints(run_id)
    if not points:
        raise RunNotFound(f"run {run_id!r} has no checkpoints kept")
    states: dict[int, RunState] = {}

    def state(point: int) -> RunState:
        if point not in states:
            states[point] = store.checkpoint(run_id, point)
        return states[point]

    found: list[Kept] = []
    last = points[-1]
    for point in points[max(after[0], 1) :]:
        before, now = state(point.point - 1), state(point.point)
        events: list[dict[str, Any]] = []
        if points[point.point - 1].stop == "awaiting_approval":
            decision = _decision_on(store, run_id, before.pause_id)
            events += [decided_event(decision)] if decision is not None else []
        events += [data for _, data in transcript_events(run_id, now, len(before.messages))[0]]
        if point.stop is not None:
            events += rest_events(run_id, _result(agent_for(now), now))
        found += [Kept((point.point, n), data) for n, data in enumerate(events) if (point.point, n) > after]
    resting = last.stop is not None
    if last.stop == "awaiting_approval":
        decision = _decision_on(store, run_id, state(last.point).pause_id)
        if decision is not None:  # decided: the next stretch opens with it
            resting = False
            found += [Kept((last.point + 1, 0), decided_event(decision))] if (last.point + 1, 0) > after else []
    if not resting:
        summary = store.load(run_id).summary
        if summary.status == "failed":
            failed = Kept((last.point + 2, 0), failed_event(run_id, summary.reason))
            found += [failed] if failed.id > after else []
            resting = True
    return found, resting


class Tracker:
    """
    The kept events of a run this process drives, derived from its state as it goes; numbered as the store will.

    ``keep`` receives each event with its place. Fed every engine event
    (:meth:`heard`) and every commit (:meth:`saved`, see :class:`Watched`),
    from the thread driving the run. The engine's events reach it after the
    commits they precede; the state is read as it stands, each message's
    events placed in the stretch of the first checkpoint holding it.
    """

    def __init__(
        self, run_id: str, start: Opening, keep: Callable[[Kept], None], wake: Callable[[], object] = lambda: None
    ) -> None:
        self.run_id = run_id
        self.keep = keep
        self.wake = wake
        self.state: RunState | None = None
        self._committed = start.point  # the latest checkpoint committed
        self._bounds: list[tuple[int, int]] = []  # (checkpoint, its message count), committed while driving
        self._message = start.message
        self._counts: dict[int, int] = {start.point + 1: start.index}

    def saved(self, state: RunState, checkpoint: bool) -> None:
        """A commit of ``state`` (``checkpoint``: with no effect in flight) went through."""
        self.state = state
        if checkpoint:
            self._committed += 1
            self._bounds.append((self._committed, len(state.messages)))

    def _place(self, message: int | None) -> EventId:
        """The place of the next event of message ``message`` (``None``: of the latest checkpoint's rest)."""
        point = self._committed if message is None else self._committed + 1
        if message is not None:
            point = next((p for p, count in self._bounds if count > message), point)
        index = self._counts.get(point, 0)
        self._counts[point] = index + 1
        return (point, index)

    def heard(self, event: RunEvent) -> None:
        """Derive what ``event`` made known: new messages' events, then a rest's."""
        if isinstance(event, Ended):
            self.state = event.result.state
        state = self.state
        if state is None or (len(state.messages) <= self._message and not isinstance(event, Ended)):
            return  # nothing new (most events)
        found, upto = transcript_events(self.run_id, state, self._message)
        for at, data in found:  # placed by the message each comes from
            self.keep(Kept(self._place(at), data))
        self._message = upto
        if isinstance(event, Ended):
            for data in rest_events(self.run_id, event.result):
                self.keep(Kept(self._place(None), data))

    def decided(self, decision: Decision) -> None:
        """The decision this process took, first of the stretch after the pause."""
        self.keep(Kept((self._committed + 1, 0), decided_event(decision)))
        self.wake()

    def failed(self, error: str | None) -> None:
        """A bug stopped the run: the store recorded it failed with ``error``."""
        self.keep(Kept((self._committed + 2, 0), failed_event(self.run_id, error)))


class Watched:
    """
    ``store`` as the thread driving one run uses it: each commit and decision of the run told to its tracker.

    Everything else goes to ``store`` as it is.
    """

    def __init__(self, store: RunStore, run_id: str, start: Callable[[Opening], Tracker]) -> None:
        self._store = store
        self._run_id = run_id
        self._start = start
        self.tracker: Tracker | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def save(self, run_id: str, state: RunState, intent: Intent | None = None) -> None:
        """Commit through the store, then tell the tracker (a checkpoint when no effect is in flight)."""
        self._store.save(run_id, state, intent)
        if self.tracker is not None and run_id == self._run_id:
            self.tracker.saved(state, intent is None)

    def decide(self, run_id: str, pause_id: str, decision: str, **how: Any) -> StoredRun:
        """Decide through the store; the tracker starts after the pause, with the decision recorded."""
        decided = self._store.decide(run_id, pause_id, decision, **how)
        if run_id == self._run_id:
            self.tracker = self._start(opening(self._store, run_id))
            self.tracker.state = decided.state
            recorded = _decision_on(self._store, run_id, pause_id)
            if recorded is not None:
                self.tracker.decided(recorded)
        return decided
