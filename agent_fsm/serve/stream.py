"""
The one event stream every protocol adapts: each run's events, numbered, kept, and waited on.

A run's events are appended by the thread driving it (the run's ``on_event``)
and read by any number of subscribers, each from the number after the last
it saw: nothing is lost or repeated, in order. Protocols (AG-UI, A2A) turn
these same records into their own wire events; none of them drives a run.
The plain API streams the run's kept events (:mod:`agent_fsm.serve.kept`),
derived here as the run goes while this process drives it, and numbered as
any process reading the store numbers them.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import attrs

from agent_fsm.engine import Ended, RunEvent, event_to_json
from agent_fsm.serve.kept import EventId, Kept, Opening, Tracker, result_data

__all__ = ["COMPLETED_STOPS", "Hub", "Record", "RunLog", "event_data", "result_data"]

COMPLETED_STOPS = frozenset({"answered", "tool_ended", "handed_over"})
"""The stops every protocol says as a success; a pause asks for a person, any other stop is a failure."""


def event_data(event: RunEvent) -> dict[str, Any]:
    """``event`` as JSON data (an ``ended`` event carries the rest, not the whole saved state)."""
    if isinstance(event, Ended):
        return {"type": "ended", "run_id": event.run_id, "at": event.at, **result_data(event.result)}
    data: dict[str, Any] = json.loads(json.dumps(event_to_json(event), default=repr))
    return data


@attrs.frozen
class Record:
    """
    One event of a run as kept: its number in the run (from 1), the event itself.

    A run a bug stopped ends with a ``failed`` record (no event, its ``failure``): the store has it as failed.
    """

    seq: int
    event: RunEvent | None
    failure: dict[str, Any] | None = None

    @property
    def data(self) -> dict[str, Any]:
        """The record as JSON data, made when a protocol reads it (most events of a run are read by none)."""
        return event_data(self.event) if self.event is not None else dict(self.failure or {})

    @property
    def rests(self) -> bool:
        """Whether the run rests after this record (ended, paused, or failed)."""
        return self.event is None or isinstance(self.event, Ended)


class RunLog:
    """
    One run's events in order, appended from any thread, awaited from the server's event loop.

    ``resting`` is whether the last event is an ``ended`` one (the run ended or paused).
    ``driving`` is whether this process drives the run now: its kept events
    are then derived here as they come (:meth:`drive`), else read from the store.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, run_id: str = "") -> None:
        self._loop = loop
        self._run_id = run_id
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._kept: list[Kept] = []
        self._tracker: Tracker | None = None
        self.driving = False
        self._from = 0  # the checkpoint this process took the run up from
        self._waking = False  # a wake-up is scheduled on the loop and has not run yet
        self._changed = asyncio.Event()

    def drive(self, start: Opening) -> Tracker:
        """This process drives the run from ``start`` on (a checkpoint committed): derive its kept events."""
        tracker = Tracker(self._run_id, start, self._keep, self._wake)
        with self._lock:
            self._tracker = tracker
            self._from = start.point
            self.driving = True
        return tracker

    def _wake(self) -> None:
        """Wake the subscribers on the loop: once for however many events came meanwhile."""
        with self._lock:
            if self._waking:
                return
            self._waking = True
        self._loop.call_soon_threadsafe(self._woken)

    def _woken(self) -> None:
        with self._lock:
            self._waking = False
        self._changed.set()

    def covers(self, after: EventId) -> bool:
        """Whether this log holds every kept event after ``after`` (it began driving no later than that)."""
        return self._from == 0 or after[0] > self._from

    def _keep(self, kept: Kept) -> None:
        with self._lock:
            self._kept.append(kept)

    def let_go(self, run_id: str, error: str) -> None:
        """
        This process drives the run no more (it failed here but is still running in the store): the kept
        stream reads the store; the numbered one ends with an ``interrupted`` record, since what comes next,
        if anything, is told by the process that takes the run over.
        """
        said = f"{error}; the run is left running for the process that takes it over"
        self._stopped({"type": "failed", "run_id": run_id, "error": said, "code": "interrupted"})
        self._wake()

    def _stopped(self, data: dict[str, Any]) -> Tracker | None:
        """
        End the numbered stream with ``data`` (a bug stopped the run here) and drive no more; the tracker this
        process had (the caller wakes the subscribers once whatever it adds is in).
        """
        with self._lock:
            self._records.append(Record(len(self._records) + 1, None, data))
            tracker, self._tracker = self._tracker, None
            self.driving = False
        return tracker

    @property
    def resting(self) -> bool:
        """Whether the run rests after its last event (nothing more comes until a decision)."""
        with self._lock:
            return bool(self._records) and self._records[-1].rests

    def _count(self) -> int:
        with self._lock:
            return len(self._records)

    def append(self, event: RunEvent) -> None:
        """Keep ``event`` (from the thread driving the run), derive its kept events, and wake the subscribers."""
        with self._lock:
            self._records.append(Record(len(self._records) + 1, event))
        tracker = self._tracker
        if tracker is not None:
            tracker.heard(event)
            if isinstance(event, Ended):  # at rest: whoever decides it drives it next
                with self._lock:
                    self._tracker = None
                    self.driving = False
        self._wake()

    def fail(self, run_id: str, error: str, recorded: str | None = None) -> None:
        """Close the stream of a run a bug stopped, saying what stopped it (``recorded``: as the store has it)."""
        tracker = self._stopped({"type": "failed", "run_id": run_id, "error": error, "code": "failed"})
        if tracker is not None:
            tracker.failed(recorded)
        self._wake()

    def kept_after(self, after: EventId) -> list[Kept]:
        """The kept events derived here placed after ``after``."""
        with self._lock:
            return [kept for kept in self._kept if kept.id > after]

    async def follow_kept(self, after: EventId, *, keepalive: float = 15.0) -> AsyncIterator[list[Kept] | None]:
        """
        The kept events after ``after`` as this process derives them, those at hand together (``None`` every
        ``keepalive`` seconds of quiet).

        Ends after a resting event that is the latest, or when this process
        stops driving the run with nothing more to give (it goes on elsewhere).
        """
        while True:
            self._changed.clear()
            driving = self.driving
            batch = self.kept_after(after)
            if batch:
                after = batch[-1].id
                yield batch
                if batch[-1].rests and not self.kept_after(after):
                    return
                continue
            if not driving:
                return
            try:
                await asyncio.wait_for(self._changed.wait(), keepalive)
            except TimeoutError:
                yield None

    def after(self, seq: int) -> list[Record]:
        """The records numbered above ``seq``."""
        with self._lock:
            return self._records[max(seq, 0) :]

    async def follow(
        self, seq: int, *, until_rest: bool = True, keepalive: float = 15.0
    ) -> AsyncIterator[Record | None]:
        """
        The records after ``seq`` as they come (``None`` every ``keepalive`` seconds of quiet).

        With ``until_rest`` the iteration ends after a resting record that is
        the log's last: the run rests (an earlier pause, since decided, does not end it).
        """
        while True:
            self._changed.clear()
            for record in self.after(seq):
                seq = record.seq
                yield record
                if until_rest and record.rests and seq == self._count():
                    return
            try:
                await asyncio.wait_for(self._changed.wait(), keepalive)
            except TimeoutError:
                yield None


class Hub:
    """The event logs of the runs this process drives, the oldest resting ones forgotten past ``limit``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, limit: int = 10_000) -> None:
        self._loop = loop
        self._limit = limit
        self._lock = threading.Lock()
        self._logs: OrderedDict[str, RunLog] = OrderedDict()

    def open(self, run_id: str) -> RunLog:
        """The run's log, made if new (a decided run goes on in the log it paused in)."""
        with self._lock:
            log = self._logs.get(run_id)
            if log is None:
                log = self._logs[run_id] = RunLog(self._loop, run_id)
                if len(self._logs) > self._limit:
                    for old in [k for k, v in self._logs.items() if v.resting][: len(self._logs) - self._limit]:
                        del self._logs[old]
            return log

    def get(self, run_id: str) -> RunLog | None:
        """The run's log if this process holds it."""
        with self._lock:
            return self._logs.get(run_id)
