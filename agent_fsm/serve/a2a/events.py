"""
The run as A2A 1.0 sees it: a task whose state follows the run's, built from the store's summary or the event stream.

The task's id is the run's id. A run running is ``TASK_STATE_WORKING``; a
pause is ``TASK_STATE_INPUT_REQUIRED`` (the next message to the task decides
it); an answer is ``TASK_STATE_COMPLETED`` with the answer as an artifact;
any other stop is ``TASK_STATE_FAILED`` whose status says the run's code and
reason; a run a bug stopped is ``TASK_STATE_FAILED`` with code ``failed``
(docs/serving.md has the table).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from agent_fsm import Agent
from agent_fsm.engine import Ended, ModelReplied, RunState
from agent_fsm.serve.core import asks
from agent_fsm.serve.stream import COMPLETED_STOPS, Record
from agent_fsm.store.records import RunSummary

__all__ = ["Tasks", "agent_message", "state_of"]


def state_of(status: str, stop: str | None) -> str:
    """The A2A task state of a run stored as ``status`` with ``stop``."""
    if status == "running":
        return "TASK_STATE_WORKING"
    if status == "paused":
        return "TASK_STATE_INPUT_REQUIRED"
    if status == "ended" and stop in COMPLETED_STOPS:
        return "TASK_STATE_COMPLETED"
    if status == "ended" and stop == "cancelled":
        return "TASK_STATE_CANCELED"
    return "TASK_STATE_FAILED"


def agent_message(text: str, task_id: str, context_id: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """An A2A message from the agent: ``text``, and ``data`` as a data part if given."""
    parts: list[dict[str, Any]] = [{"text": text}]
    if data is not None:
        parts.append({"data": data, "mediaType": "application/json"})
    return {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_AGENT",
        "taskId": task_id,
        "contextId": context_id,
        "parts": parts,
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Tasks:
    """A2A tasks and stream responses for the runs of one context (``context_id``)."""

    def __init__(self, context_id: str, agent: Agent) -> None:
        self.context_id = context_id
        self.agent = agent

    def status(self, task_id: str, state: str, message: dict[str, Any] | None = None) -> dict[str, Any]:
        """A task status: its state now, with the agent's message if any."""
        status: dict[str, Any] = {"state": state, "timestamp": _now()}
        if message is not None:
            status["message"] = message
        return status

    def task(
        self, task_id: str, state: str, *, message: dict[str, Any] | None = None, answer: str | None = None
    ) -> dict[str, Any]:
        """A whole task: id, context, status, and the answer as an artifact once there is one."""
        task: dict[str, Any] = {
            "id": task_id,
            "contextId": self.context_id,
            "status": self.status(task_id, state, message),
        }
        if answer is not None:
            task["artifacts"] = [{"artifactId": f"{task_id}.answer", "name": "answer", "parts": [{"text": answer}]}]
        return task

    def of_summary(self, summary: RunSummary, state: RunState, cancelled_by: str | None = None) -> dict[str, Any]:
        """The task of a stored run, its pause or ending said in its status message; ``cancelled_by``: who cancelled."""
        task_state = state_of(summary.status, summary.stop)
        message = None
        if task_state == "TASK_STATE_CANCELED":
            said = {"stop": summary.stop, "code": state.code or summary.stop, "cancelled_by": cancelled_by}
            message = agent_message(summary.reason or "cancelled", summary.run_id, self.context_id, said)
        elif task_state == "TASK_STATE_INPUT_REQUIRED":
            message = self._pause_message(summary.run_id, summary.reason or "", state)
        elif task_state == "TASK_STATE_FAILED":
            code = {"stop": summary.stop, "reason": summary.reason, "status": summary.status}
            message = agent_message(summary.reason or summary.status, summary.run_id, self.context_id, code)
        answer = state.answer if task_state.endswith("COMPLETED") else None
        return self.task(summary.run_id, task_state, message=message, answer=answer)

    def _pause_message(self, task_id: str, reason: str, state: RunState) -> dict[str, Any]:
        data = {"pause_id": state.pause_id, **asks(self.agent, state)}
        return agent_message(reason, task_id, self.context_id, data)

    def translate(self, record: Record) -> list[dict[str, Any]]:
        """The stream responses one record of the run becomes (a model's words are a working status)."""
        task_id = str(record.data.get("run_id"))
        event = record.event
        if event is None:
            code = {"code": str(record.data.get("code", "failed"))}  # failed, or interrupted: left for a takeover
            failed = agent_message(str(record.data.get("error")), task_id, self.context_id, code)
            return [self._update(task_id, "TASK_STATE_FAILED", failed)]
        if isinstance(event, ModelReplied) and event.text:
            said = agent_message(event.text, task_id, self.context_id)
            return [self._update(task_id, "TASK_STATE_WORKING", said)]
        if not isinstance(event, Ended):
            return []
        result = event.result
        stop = result.stop.value
        if stop == "awaiting_approval":
            message = self._pause_message(task_id, result.reason or "", result.state)
            return [self._update(task_id, "TASK_STATE_INPUT_REQUIRED", message)]
        if stop in COMPLETED_STOPS:
            artifact = {"artifactId": f"{task_id}.answer", "name": "answer", "parts": [{"text": result.answer or ""}]}
            update = {"taskId": task_id, "contextId": self.context_id, "artifact": artifact, "lastChunk": True}
            return [{"artifactUpdate": update}, self._update(task_id, "TASK_STATE_COMPLETED", None)]
        said = agent_message(result.reason or stop, task_id, self.context_id, {"stop": stop, "code": result.code})
        return [self._update(task_id, "TASK_STATE_CANCELED" if stop == "cancelled" else "TASK_STATE_FAILED", said)]

    def _update(self, task_id: str, state: str, message: dict[str, Any] | None) -> dict[str, Any]:
        status = self.status(task_id, state, message)
        return {"statusUpdate": {"taskId": task_id, "contextId": self.context_id, "status": status}}
