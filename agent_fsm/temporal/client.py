"""
Starting runs by an agent's name, and deciding their pauses, from any process that reaches the server.

    handle = await start_run(client, agent="support-desk", task="My order A-17 came broken.", run_id="ticket-1")
    state = await handle.state()                    # a query: where the run is, its transcript, its path
    await handle.approve(reviewer="ana")            # an update: refused unless the run waits on that pause
    result = await handle.result()                  # the same RunResult an in-process run returns
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent_fsm.engine import (
    AlreadyDecided,
    CallDecision,
    DecisionRefused,
    RunEvent,
    RunResult,
    RunState,
    event_from_json,
    reply_data,
)
from agent_fsm.temporal.codec import result_of

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

__all__ = ["DEFAULT_TASK_QUEUE", "AlreadyDecided", "DecisionRefused", "RunHandle", "get_run", "start_run"]

DEFAULT_TASK_QUEUE = "agent-fsm"
"""The task queue runs are started on and workers poll when none is named."""


class RunHandle:
    """One run on the server, by its id (the workflow id): its result, its state, and the decisions on it."""

    def __init__(self, handle: WorkflowHandle[Any, Any]) -> None:
        self.handle = handle
        self.run_id: str = handle.id

    async def result(self) -> RunResult:
        """Wait for the run to end and return its result, its state checked as it is read."""
        return result_of(await self.handle.result())

    async def state(self) -> RunState:
        """The run's state now (a query, answered by a worker): current machine state, transcript, path."""
        return RunState.from_json(await self.handle.query("state"))

    async def events(self, after: int = 0) -> tuple[int, list[RunEvent]]:
        """
        The run's events numbered above ``after`` (a query; kept only for a run started with ``keep_events``),
        with the number of the first returned: a run continued as new carries only its latest events, so a
        reader far behind finds the first number past ``after + 1``.
        """
        found = await self.handle.query("events", after)
        return found["first"], [event_from_json(data) for data in found["events"]]

    async def decisions(self) -> list[dict[str, Any]]:
        """Every decision taken on the run's pauses: ``decision``, ``pause_id``, ``reviewer``, ``at``, ``reason``."""
        found: list[dict[str, Any]] = await self.handle.query("decisions")
        return found

    async def _decide(self, kind: str, decision: dict[str, Any]) -> str:
        from temporalio.client import WorkflowUpdateFailedError
        from temporalio.exceptions import ApplicationError
        from temporalio.service import RPCError

        if decision.get("pause_id") is None:
            state = await self.state()
            decision["pause_id"] = state.pause_id
        try:
            decided: str = await self.handle.execute_update(kind, decision)
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            refusals = ("AlreadyDecided", "NotPaused", "BadDecision", "BadAnswer", "PartialDecision")
            if isinstance(cause, ApplicationError) and cause.type in refusals:
                error = AlreadyDecided if cause.type == "AlreadyDecided" else DecisionRefused
                raise error(cause.message, cause.type) from exc
            raise
        except RPCError as exc:
            # The run ended (or ended while the update was on its way): whether this pause was decided says which.
            if "closing workflow" not in str(exc) and "already completed" not in str(exc):
                raise
            if any(d["pause_id"] == decision["pause_id"] for d in await self.decisions()):
                raise AlreadyDecided(f"pause {decision['pause_id']!r} was decided already", "AlreadyDecided") from exc
            raise DecisionRefused("the run has ended: it waits for no decision", "NotPaused") from exc
        return decided

    async def approve(
        self, *, reviewer: str, arguments: Mapping[str, Any] | None = None, pause_id: str | None = None
    ) -> str:
        """
        Approve the pause ``pause_id`` (default: the one open now); returns the pause id decided.

        ``arguments`` replaces the blocked call's arguments (a reviewer's
        edit); the edited call must satisfy its contract and not be denied
        by the gate, or nothing is decided. The approved call is judged
        afresh in the workflow, as :func:`agent_fsm.resume` judges it.

        Raises:
            AlreadyDecided: that pause was decided already (by another reviewer, a moment earlier).
            DecisionRefused: the run is not paused there, or the edit is refused.
        """
        edit = dict(arguments) if arguments is not None else None
        return await self._decide("approve", {"reviewer": reviewer, "arguments": edit, "pause_id": pause_id})

    async def reject(self, *, reviewer: str, reason: str = "", pause_id: str | None = None) -> str:
        """
        Reject the pause ``pause_id`` (default: the one open now): the call becomes a ``denied`` observation.

        Raises:
            AlreadyDecided: that pause was decided already.
            DecisionRefused: the run is not paused there.
        """
        return await self._decide("reject", {"reviewer": reviewer, "reason": reason, "pause_id": pause_id})

    async def answer(self, *, reviewer: str, answer: Any, pause_id: str | None = None) -> str:
        """
        Answer the pause ``pause_id`` (default: the one open now), a call to a tool a person answers.

        Raises:
            AlreadyDecided: that pause was decided already.
            DecisionRefused: the run is not paused there, or the answer breaks the tool's result schema
                (kind ``BadAnswer``; nothing is decided).
        """
        return await self._decide("answer", {"reviewer": reviewer, "answer": answer, "pause_id": pause_id})

    async def cancel(self, *, reviewer: str, reason: str, pause_id: str | None = None) -> str:
        """
        Reject the pause ``pause_id`` (default: the one open now) with ``reason`` and end the run there: its
        budget of model calls is closed at the calls made, so it rests on ``step_limit`` with nothing run after.

        Raises:
            AlreadyDecided: that pause was decided already.
            DecisionRefused: the run is not paused there.
        """
        return await self._decide("cancel", {"reviewer": reviewer, "reason": reason, "pause_id": pause_id})

    async def review(self, *, reviewer: str, reply: Mapping[str, CallDecision], pause_id: str | None = None) -> str:
        """
        Decide every call of the paused reply at once (:meth:`agent_fsm.Agent.reply_review` lists them), in one
        update: ``reply`` maps each call id to its :class:`~agent_fsm.CallDecision`.

        Raises:
            AlreadyDecided: that pause was decided already.
            DecisionRefused: the run is not paused there, a call of the reply is left undecided or one awaits
                nobody (kind ``PartialDecision``), an answer breaks its schema (``BadAnswer``): nothing is decided.
        """
        return await self._decide("reply", {"reviewer": reviewer, "reply": reply_data(reply), "pause_id": pause_id})


async def start_run(
    client: Client,
    *,
    agent: str,
    task: str,
    run_id: str,
    history: Sequence[Mapping[str, Any]] = (),
    task_queue: str = DEFAULT_TASK_QUEUE,
    history_bound: int | None = None,
    execution_timeout: timedelta | None = None,
    keep_events: bool = False,
) -> RunHandle:
    """
    Start a run of the agent registered as ``agent`` on the workers of ``task_queue``; its id is ``run_id``.

    ``run_id`` is the workflow id: starting a second run under an id in use
    is refused by the server. ``history_bound`` is the number of history
    events after which the run continues as new (default
    :data:`agent_fsm.temporal.HISTORY_BOUND`); ``execution_timeout`` bounds
    the run's whole life, pauses included. With ``keep_events`` the workflow
    keeps the run's events (the stream ``on_event`` hears in-process) for
    :meth:`RunHandle.events`, which is how ``agent_fsm.serve`` streams a run on Temporal.
    """
    from agent_fsm.temporal.workflow import WORKFLOW_NAME

    if not isinstance(run_id, str) or not run_id:
        raise TypeError(f"a run needs a run_id to be found by (a non-empty str, got {run_id!r})")
    start = {"agent": agent, "task": task, "history": [dict(m) for m in history], "history_bound": history_bound}
    if keep_events:
        start["keep_events"] = True
    handle = await client.start_workflow(
        WORKFLOW_NAME, start, id=run_id, task_queue=task_queue, execution_timeout=execution_timeout
    )
    return RunHandle(handle)


def get_run(client: Client, run_id: str) -> RunHandle:
    """The handle of the run ``run_id`` started earlier, from any process (e.g. a reviewer's)."""
    return RunHandle(client.get_workflow_handle(run_id))
