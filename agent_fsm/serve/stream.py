"""
The one event stream every protocol adapts: each run's events, numbered, kept, and waited on.

A run's events are appended by the thread driving it (the run's ``on_event``)
and read by any number of subscribers, each from the number after the last
it saw (SSE's ``Last-Event-ID``): nothing is lost or repeated, in order.
Protocols (the plain SSE API, AG-UI, A2A) turn these same records into their
own wire events; none of them drives a run.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import attrs

from agent_fsm.engine import Ended, RunEvent, RunResult, event_to_json

__all__ = ["COMPLETED_STOPS", "Hub", "Record", "RunLog", "event_data", "result_data"]

COMPLETED_STOPS = frozenset({"answered", "tool_ended", "handed_over"})
"""The stops every protocol says as a success; a pause asks for a person, any other stop is a failure."""


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


def event_data(event: RunEvent) -> dict[str, Any]:
    """``event`` as JSON data (an ``ended`` event carries the rest, not the whole saved state)."""
    if isinstance(event, Ended):
        return {"type": "ended", "run_id": event.run_id, "at": event.at, **result_data(event.result)}
    data: dict[str, Any] = json.loads(json.dumps(event_to_json(event), default=repr))
    return data


@attrs.frozen
class Record:
    """
    One event of a run as kept: its number in the run (from 1), its JSON data, the event itself.

    A run a bug stopped ends with a ``failed`` record (no event): the store has it as failed.
    """

    seq: int
    data: dict[str, Any]
    event: RunEvent | None

    @property
    def rests(self) -> bool:
        """Whether the run rests after this record (ended, paused, or failed)."""
        return self.event is None or isinstance(self.event, Ended)


class RunLog:
    """
    One run's events in order, appended from any thread, awaited from the server's event loop.

    ``resting`` is whether the last event is an ``ended`` one (the run ended or paused).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._changed = asyncio.Event()

    @property
    def resting(self) -> bool:
        """Whether the run rests after its last event (nothing more comes until a decision)."""
        with self._lock:
            return bool(self._records) and self._records[-1].rests

    def _count(self) -> int:
        with self._lock:
            return len(self._records)

    def append(self, event: RunEvent) -> None:
        """Keep ``event`` (from the thread driving the run) and wake the subscribers."""
        with self._lock:
            self._records.append(Record(len(self._records) + 1, event_data(event), event))
        self._loop.call_soon_threadsafe(self._changed.set)

    def fail(self, run_id: str, error: str) -> None:
        """Close the stream of a run a bug stopped, saying what stopped it."""
        with self._lock:
            self._records.append(
                Record(len(self._records) + 1, {"type": "failed", "run_id": run_id, "error": error}, None)
            )
        self._loop.call_soon_threadsafe(self._changed.set)

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
                log = self._logs[run_id] = RunLog(self._loop)
                if len(self._logs) > self._limit:
                    for old in [k for k, v in self._logs.items() if v.resting][: len(self._logs) - self._limit]:
                        del self._logs[old]
            return log

    def get(self, run_id: str) -> RunLog | None:
        """The run's log if this process holds it."""
        with self._lock:
            return self._logs.get(run_id)
