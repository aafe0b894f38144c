"""
The run's events as AG-UI 1.0 events: one translator per AG-UI run, fed the run's records in order.

A machine state is a step (``STEP_STARTED``/``STEP_FINISHED`` named for the
state); a model's text is a text message (``TEXT_MESSAGE_START``/``CONTENT``/``END``);
a proposed call is a tool call (``TOOL_CALL_START``/``ARGS``/``END``) and its
observation a ``TOOL_CALL_RESULT``; each charge is a ``STATE_SNAPSHOT`` of the
budgets spent. The rest ends the AG-UI run: an answer is a success, a pause an
interrupt (answered by the next run's ``resume``), any other stop a
``RUN_ERROR`` whose ``code`` is the run's code (see docs/serving.md).
"""

from __future__ import annotations

import json
from typing import Any

from agent_fsm import Agent
from agent_fsm.engine import (
    Charged,
    Ended,
    ModelReplied,
    Observed,
    Paused,
    Proposed,
    StateEntered,
    TextDelta,
)
from agent_fsm.serve.core import asks
from agent_fsm.serve.stream import COMPLETED_STOPS, Record

__all__ = ["SUCCESS_STOPS", "Translator", "interrupt_id", "split_interrupt_id"]

SUCCESS_STOPS = COMPLETED_STOPS
"""The stops an AG-UI run finishes with ``outcome: success``; a pause is an interrupt, any other a ``RUN_ERROR``."""

_SEPARATOR = "|"  # neither in a served run's id (client name, a dot, hex) nor in a pause's id (hex)


def interrupt_id(run_id: str, pause_id: str) -> str:
    """The AG-UI interrupt id of a pause: the run and the pause, so a resume names both."""
    return f"{run_id}{_SEPARATOR}{pause_id}"


def split_interrupt_id(text: str) -> tuple[str, str] | None:
    """The run and pause an interrupt id names, or None if it is not one of ours."""
    run_id, sep, pause_id = text.partition(_SEPARATOR)
    return (run_id, pause_id) if sep and run_id and pause_id else None


class Translator:
    """The AG-UI events of one AG-UI run (``thread_id``, ``run_id``) over the served run ``served``."""

    def __init__(self, thread_id: str, run_id: str, served: str, agent: Agent) -> None:
        self.agent = agent
        self.thread_id = thread_id
        self.run_id = run_id
        self.served = served
        self._step: str | None = None
        self._message: str | None = None
        self._spent: dict[str, Any] = {"model_calls": 0, "input_tokens": 0, "output_tokens": 0, "cost": "0"}

    def started(self, given: dict[str, Any]) -> dict[str, Any]:
        """``RUN_STARTED``, echoing the input and naming the served run."""
        return {
            "type": "RUN_STARTED",
            "threadId": self.thread_id,
            "runId": self.run_id,
            "input": given,
            "metadata": {"agent_fsm": {"run_id": self.served}},
        }

    def error(self, message: str, code: str) -> dict[str, Any]:
        """``RUN_ERROR`` (nothing may follow it)."""
        return {"type": "RUN_ERROR", "message": message, "code": code}

    def translate(self, record: Record) -> list[dict[str, Any]]:
        """The AG-UI events one record of the run becomes (none for what AG-UI has no word for)."""
        event = record.event
        if event is None:  # a bug stopped the run: failed in the store, or interrupted (left for a takeover)
            said = str(record.data.get("error", "the run failed"))
            return [*self._close(), self.error(said, str(record.data.get("code", "failed")))]
        if isinstance(event, StateEntered):
            opened = {"type": "STEP_STARTED", "stepName": event.state}
            closed = self._close()
            self._step = event.state
            return [*closed, opened]
        if isinstance(event, TextDelta) and event.text:
            return [*self._open_message(event.turn), self._content(event.text)]
        if isinstance(event, ModelReplied):
            if self._message is not None:
                return self._end_message()
            if event.text:
                return [*self._open_message(event.turn), self._content(event.text), *self._end_message()]
            return []
        if isinstance(event, Proposed):
            arguments = json.dumps(event.arguments, default=repr)
            call = {"toolCallId": event.call_id}
            return [
                *self._end_message(),
                {"type": "TOOL_CALL_START", "toolCallName": event.name, **call},
                {"type": "TOOL_CALL_ARGS", "delta": arguments, **call},
                {"type": "TOOL_CALL_END", **call},
            ]
        if isinstance(event, Observed):
            content = event.content if isinstance(event.content, str) else json.dumps(event.content, default=repr)
            message = f"{self.served}.result.{event.call_id}"
            return [{"type": "TOOL_CALL_RESULT", "messageId": message, "toolCallId": event.call_id, "content": content}]
        if isinstance(event, Charged):
            spent = self._spent
            spent["model_calls"] += 1
            spent["input_tokens"] += event.input_tokens
            spent["output_tokens"] += event.output_tokens
            spent["cost"] = event.total
            return [{"type": "STATE_SNAPSHOT", "snapshot": {"spent": dict(spent)}}]
        if isinstance(event, Paused):
            return []  # the rest that follows carries the interrupt
        if isinstance(event, Ended):
            return [*self._close(), self._finished(event)]
        return []

    def _finished(self, event: Ended) -> dict[str, Any]:
        result = event.result
        stop = result.stop.value
        ids = {"threadId": self.thread_id, "runId": self.run_id}
        if stop == "awaiting_approval":
            asked = asks(self.agent, result.state)
            interrupt: dict[str, Any] = {
                "id": interrupt_id(self.served, result.state.pause_id or ""),
                "reason": "input" if "question" in asked else "approval",
                "message": result.reason,
                "toolCallId": asked["call"]["call_id"],
                "responseSchema": _response_schema(asked),
                "metadata": {"agent_fsm": {"run_id": self.served, "pause_id": result.state.pause_id, **asked}},
            }
            return {"type": "RUN_FINISHED", **ids, "outcome": {"type": "interrupt", "interrupts": [interrupt]}}
        if stop in SUCCESS_STOPS:
            answer = {"stop": stop, "code": result.code, "answer": result.answer}
            return {"type": "RUN_FINISHED", **ids, "result": answer, "outcome": {"type": "success"}}
        return self.error(result.reason or stop, result.code)

    def _open_message(self, turn: int) -> list[dict[str, Any]]:
        if self._message is not None:
            return []
        self._message = f"{self.served}.reply.{turn}"
        return [{"type": "TEXT_MESSAGE_START", "messageId": self._message, "role": "assistant"}]

    def _content(self, text: str) -> dict[str, Any]:
        return {"type": "TEXT_MESSAGE_CONTENT", "messageId": self._message, "delta": text}

    def _end_message(self) -> list[dict[str, Any]]:
        if self._message is None:
            return []
        ended = {"type": "TEXT_MESSAGE_END", "messageId": self._message}
        self._message = None
        return [ended]

    def _close(self) -> list[dict[str, Any]]:
        closed = self._end_message()
        if self._step is not None:
            closed.append({"type": "STEP_FINISHED", "stepName": self._step})
            self._step = None
        return closed


_DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["approve", "edit", "reject", "answer", "reply", "cancel"]},
        "arguments": {"type": "object"},
        "reason": {"type": "string"},
        "answer": {},
        "reply": {"type": "object"},
    },
    "required": ["decision"],
}
"""What a resume's ``payload`` holds: the same decision the plain API takes (the interrupt's metadata says which)."""


def _response_schema(asked: dict[str, Any]) -> dict[str, Any]:
    """This pause's resume payload: the decisions it takes, and an answer held to the schema the pause asks."""
    properties: dict[str, Any] = {**_DECISION_SCHEMA["properties"], "decision": {"enum": asked["decisions"]}}
    if "result_schema" in asked:
        properties["answer"] = asked["result_schema"]
    return {**_DECISION_SCHEMA, "properties": properties}
