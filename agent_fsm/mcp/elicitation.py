"""
MCP elicitation: a server asks a person something in the middle of a call, and the run pauses on that call.

Rationale: the call stays open. Its ``tools/call`` request and the server's
``elicitation/create`` request both live on the connection's event loop, so
when a server asks, the coroutine answering it simply waits there for the
person, and the handler (in the driver's thread) returns to the engine with
:class:`agent_fsm.ApprovalNeeded`: the run rests in ``AwaitingApproval`` with
the server's message as the question. Nothing about the call is unknown: it
is pending, held in this process by the connection (:class:`OpenCall`, keyed
by the call's idempotency key: derived from the run's secret nonce, so a
state that is not the run's own cannot reach the call). The person's decision reaches the call through the
engine's approval: the deciding agent finds the question (its tool's
``asking``), checks an answer against the schema the server asked for, the
gate judges the call afresh, and the handler, run again under the approval,
hands the reply to the waiting coroutine and waits for the call's answer,
which becomes the observation as usual.

Only the process that holds the call open can answer it. A run resumed in
another process, after a restart, or after the server's connection closed
finds no open question: an answer is refused (``AnswerRefused``), and an
approval calls the tool again under the same idempotency key (for an effect,
the pause's reason says its outcome is unknown, as after a crash).

One thing the adapter cannot tell is which call a request belongs to when
several calls are in flight on one connection (the protocol's request does
not name it): then the server is answered with an error, and its call goes
on as the server decides. A URL-mode request (open a web page) is declined.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, Literal

from agent_fsm.engine import OpenQuestion, QuestionReply

__all__ = ["Asked", "Elicitation", "OpenCall"]

Action = Literal["accept", "decline", "cancel"]
_ACTIONS: dict[str, Action] = {"answer": "accept", "decline": "decline", "cancel": "cancel"}


class Elicitation(OpenQuestion):
    """
    A server's ``elicitation/create`` request, waiting for a person: the question, and the schema an answer meets.

    .. versionadded:: 0.4
    """

    def __init__(self, result: dict[str, Any], question: str, forget: Callable[[], None]) -> None:
        super().__init__(result, question)
        self.reply: concurrent.futures.Future[tuple[Action, Any]] = concurrent.futures.Future()
        self.held: QuestionReply | None = None
        self._forget = forget

    def errors(self, answer: Any) -> list[str]:
        """
        The schema's problems with ``answer``, and the protocol's: a flat object of the fields asked for.

        MCP carries an accepted answer as an object whose values are strings,
        numbers, booleans or lists of strings, naming only the form's fields;
        a schema that leaves more open still gets no more through.
        """
        found = super().errors(answer)
        if not isinstance(answer, dict):
            return found
        asked = self.result.get("properties", {})
        for name, value in sorted(answer.items()):
            if name not in asked:
                found.append(f"{name}: not a field of the form (it asks for {', '.join(sorted(asked)) or 'none'})")
            elif not _flat(value):
                found.append(f"{name}: {value!r} is not a string, number, boolean or list of strings")
        return found

    def hold(self, reply: QuestionReply) -> None:
        self.held = reply

    def withdraw(self) -> None:
        self._forget()
        self.send("cancel", None)

    def send(self, action: Action, content: Any) -> None:
        """Answer the server's request (from any thread); a second reply is ignored."""
        if not self.reply.done():
            self.reply.set_result((action, content))

    def send_held(self) -> None:
        """Send the reply the person's decision left for the call (none held: cancel, the call goes on)."""
        held = self.held
        if held is None:
            self.send("cancel", None)
        else:
            self.send(_ACTIONS[held.kind], held.value if held.kind == "answer" else None)


def _flat(value: Any) -> bool:
    if isinstance(value, str | bool | int | float):
        return True
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


class Asked(Exception):
    """Inside the adapter: the call's server asked a person (never raised out of a handler)."""

    def __init__(self, question: Elicitation) -> None:
        super().__init__(question.question)
        self.question = question


class OpenCall:
    """
    One ``tools/call`` in flight on a connection: what it hears (progress, a question, its end) arrives in ``inbox``.

    ``key`` is the call's idempotency key when a run made the call (only such
    a call can pause for a person); ``asking`` is the question the server is
    waiting on, if any.
    """

    def __init__(self, key: str | None) -> None:
        self.key = key
        self.inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.future: concurrent.futures.Future[Any] | None = None
        self.asking: Elicitation | None = None


class OpenCalls:
    """A connection's calls in flight, and those paused on a question (by the call's idempotency key)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.flying: list[OpenCall] = []
        self.paused: dict[str, OpenCall] = {}

    def start(self, call: OpenCall) -> None:
        with self._lock:
            self.flying.append(call)

    def landed(self, call: OpenCall) -> None:
        """The call's request is over (answered, failed, cancelled): no question can be its any more."""
        with self._lock:
            if call in self.flying:
                self.flying.remove(call)

    def end(self, call: OpenCall) -> None:
        """Nobody waits on the call any more: it is neither in flight nor paused."""
        self.landed(call)
        with self._lock:
            if call.key is not None and self.paused.get(call.key) is call:
                del self.paused[call.key]

    def pause(self, call: OpenCall) -> None:
        assert call.key is not None
        with self._lock:
            self.paused[call.key] = call

    def take(self, key: str) -> OpenCall | None:
        """The call paused under ``key``, taken to go on (``None``: no such call is open here)."""
        with self._lock:
            return self.paused.pop(key, None)

    def question(self, key: str) -> Elicitation | None:
        with self._lock:
            call = self.paused.get(key)
        return None if call is None else call.asking

    def asker(self) -> OpenCall | None:
        """The one call a question can belong to: the only call in flight that is not already asking."""
        with self._lock:
            waiting = [call for call in self.flying if call.asking is None]
        return waiting[0] if len(waiting) == 1 else None

    def withdraw_all(self) -> None:
        """The connection is closing: every question still open is cancelled, and no call stays paused."""
        with self._lock:
            calls, self.paused, self.flying = list(self.paused.values()), {}, []
        for call in calls:
            if call.asking is not None:
                call.asking.send("cancel", None)
