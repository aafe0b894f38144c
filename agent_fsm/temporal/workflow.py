"""
The run machine as a Temporal workflow: the same table and async driver as ``arun``, made durable.

The workflow drives the run with the registered agent's
:meth:`~agent_fsm.Agent.aadvance` and :meth:`~agent_fsm.Agent.aresume`; its
model and the handlers it reaches are activities
(:mod:`agent_fsm.temporal.proxies`), validation and pure gates run here,
deterministic on replay (the run id is the workflow id, so pause ids and
idempotency keys are too). A pause waits for an ``approve``, ``reject``,
``answer`` or ``reply`` (a reply reviewed whole) update naming its pause id; the update's validator refuses any
other, and of two decisions on one pause the first handled wins. Past
``history_bound`` events the run continues as new, carrying its state as
its own strict JSON, at a pause or before a model call.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from agent_fsm import Agent
from agent_fsm.engine import (
    NO_ANSWER,
    AnswerRefused,
    DecisionRefused,
    Ended,
    HandlerError,
    Nested,
    RunError,
    RunEvent,
    RunResult,
    RunState,
    Stop,
    ToolCall,
    Verdict,
    acontinue_run,
    blocked_call,
    check_answer,
    check_reply,
    event_to_json,
    judge,
    reply_of,
)
from agent_fsm.temporal.codec import result_json
from agent_fsm.temporal.definition import HISTORY_BOUND, AgentDefinition, definition_for
from agent_fsm.temporal.proxies import IntentLog, OutcomeUnknown, Rollover, WorkflowModel, workflow_agent
from agent_fsm.temporal.settle import settle_unknown

__all__ = ["WORKFLOW_NAME", "RunWorkflow"]

WORKFLOW_NAME = "agent_fsm.run"
"""The workflow type every run is started under."""

EVENTS_CARRIED = 200
"""How many of its latest events a run keeping them carries when it continues as new (the rest were streamed)."""


def _refuse(kind: str, message: str, *details: Any) -> ApplicationError:
    return ApplicationError(message, *details, type=kind, non_retryable=True)


def _before_the_call(state: RunState) -> RunState:
    """
    The state as it was in ``Ready``, before the model call a rollover stopped.

    The model is asked on entering ``Proposing`` from ``Ready``, after the
    turn and the prompt's size are counted; undoing those three steps gives
    back the state the next turn starts from, so the new workflow run takes
    that turn exactly as this one would have.
    """
    entered = state.path[-2:] in (["Proposing"], ["Ready", "Proposing"])  # the first Ready is not in the path
    if not entered or state.pending or len(state.prompt_token_log) != state.turns:
        raise RunError(f"a rollover stopped the run outside a model call (in {state.machine_state!r})", state=state)
    state.path.pop()
    state.machine_state = "Ready"
    state.turns -= 1
    state.prompt_token_log.pop()
    return state


@workflow.defn(name=WORKFLOW_NAME)
class RunWorkflow:
    """One run of a registered agent, from its task (or a carried state) to its typed ending."""

    @workflow.init
    def __init__(self, start: dict[str, Any]) -> None:
        # Everything a decision's validator reads is ready before the first update can arrive.
        self._decision: dict[str, Any] | None = None
        self._decisions: list[dict[str, Any]] = list(start.get("decisions", []))
        # The run's events as their JSON, for a server to stream (start_run(..., keep_events=True)): numbered
        # from 1, the first ``_events_base`` of them heard by an earlier workflow run of this one (continued as new).
        self._keeping: bool = bool(start.get("keep_events"))
        self._events: list[dict[str, Any]] = list(start.get("events", []))
        self._events_base: int = start.get("events_base", 0)
        name = start["agent"]
        # A run carried over keeps the definition it began with: a fresh history would admit every patch.
        carried = start.get("patches")
        admits = workflow.patched if carried is None else frozenset(carried).__contains__
        definition = self._definition = definition_for(name).chosen(admits)
        agent = definition.agent
        self._bound: int = start.get("history_bound") or HISTORY_BOUND
        self._run_id = run_id = workflow.info().workflow_id
        if start.get("state") is not None:
            state = RunState.from_json(start["state"])  # carried over: checked as any saved state is
        else:
            history = start.get("history", ())
            state = agent.start(start["task"], history=history, run_id=run_id)
            state.nonce = workflow.uuid4().hex  # drawn as a replay draws it again: the run's keys stay its own
        self._log = IntentLog()
        self._log.live = state
        # A run carried over while paused waits for its decision from the first moment of the new run.
        self._resting: RunResult | None = (
            RunResult(Stop.AWAITING_APPROVAL, None, state, state.pending[0])
            if state.stop is Stop.AWAITING_APPROVAL
            else None
        )
        # The agent as the workflow runs it: its model, handlers and an I/O gate are activities, and so are
        # those of every agent it nests, each under its own name.
        self._model = WorkflowModel(name, definition.timeouts, rollover=self._over_bound)
        self._admits = admits
        self._agent: Agent = workflow_agent(name, definition, self._model, self._chosen)

    def _chosen(self, definition: AgentDefinition) -> AgentDefinition:
        return definition.chosen(self._admits)

    # --- the run -------------------------------------------------------------------

    @workflow.run
    async def run(self, start: dict[str, Any]) -> str:
        """Drive the run until it ends; each pause waits here for its decision."""
        state = self._log.live
        assert state is not None
        agent, log, run_id = self._agent, self._log, self._run_id
        heard = self._heard if self._keeping else None
        # A run carried over while paused was heard resting already: its rest is not told twice.
        first = heard if self._resting is None else None
        result = await self._drive(start, agent.aadvance(state, store=log, run_id=run_id, on_event=first))
        while result.stop is Stop.AWAITING_APPROVAL:
            self._resting = result
            if self._model.calls and self._over_bound():  # a run carried over and still paused stays as it is
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._continue(start, result.state)
            await workflow.wait_condition(lambda: self._decision is not None)
            decision, self._decision = self._decision, None
            assert decision is not None
            self._resting = None
            paused = result.state
            if decision["decision"] == "answer":
                resumed = agent.aresume(paused, answer=decision["answer"], store=log, run_id=run_id, on_event=heard)
            elif decision["decision"] == "reply":
                reply = reply_of(decision["reply"])
                resumed = agent.aresume(paused, reply=reply, store=log, run_id=run_id, on_event=heard)
            elif decision["decision"] == "cancel":  # the run ends cancelled, the calls answered as not run
                by, reason = decision["reviewer"], decision.get("reason") or ""
                resumed = agent.acancel(paused, by=by, reason=reason, store=log, run_id=run_id, on_event=heard)
            else:
                approve = decision["decision"] == "approve"
                resumed = agent.aresume(
                    paused,
                    approve=approve,
                    reason=decision.get("reason") or "",
                    arguments=decision.get("arguments") if approve else None,
                    store=log,
                    run_id=run_id,
                    on_event=heard,
                )
            result = await self._drive(start, resumed)
        self._resting = result
        return result_json(result)

    async def _drive(self, start: dict[str, Any], step: Awaitable[RunResult]) -> RunResult:
        """One stretch of driving to a rest, its ``ended`` event kept (when events are)."""
        result = await self._driven(start, step)
        if self._keeping and (not self._events or self._events[-1]["type"] != "ended"):  # a rest settled unheard
            self._heard(Ended(self._run_id, workflow.now().timestamp(), result))
        return result

    def _heard(self, event: RunEvent) -> None:
        data = json.loads(json.dumps(event_to_json(event), default=repr))
        data["at"] = workflow.now().timestamp()  # the workflow's clock: a replay tells the same events alike
        self._events.append(data)

    async def _driven(self, start: dict[str, Any], step: Awaitable[RunResult]) -> RunResult:
        """One stretch of driving; an interrupted effect is settled, a rollover continues as new."""
        try:
            return await step
        except HandlerError as exc:
            if isinstance(exc.__cause__, OutcomeUnknown):
                nested = self._log.intent is not None and bool(self._log.intent.path)
                state = settle_unknown(self._log, self._definition.agent)
                self._log.live = state
                if nested:  # settled inside a nested run: each run above pauses on it, by the recovery rules
                    return await acontinue_run(self._agent, state, store=self._log, run_id=self._run_id, intent=None)
                heard = self._heard if self._keeping else None
                return await self._agent.aadvance(state, store=self._log, run_id=self._run_id, on_event=heard)
            saved = exc.state.to_json() if exc.state is not None else None
            raise _refuse("HandlerError", f"{exc} (the run's state is in the details)", saved) from exc
        except RunError as exc:
            if isinstance(exc.__cause__, Rollover) and exc.state is not None:
                # What the stopped call's turn told since Ready the next run tells again, under the same numbers.
                while self._events and (self._events[-1]["type"], self._events[-1].get("state")) != (
                    "state_entered",
                    "Ready",
                ):
                    self._events.pop()
                self._continue(start, _before_the_call(exc.state))
            raise _refuse(type(exc).__name__, str(exc)) from exc

    def _over_bound(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() >= self._bound

    def _continue(self, start: dict[str, Any], state: RunState) -> None:
        carried = {
            "agent": start["agent"],
            "patches": self._definition.patches,
            "state": state.to_json(),
            "decisions": self._decisions,
            "history_bound": start.get("history_bound"),
        }
        if self._keeping:  # the latest events travel on, for a server that has not read them yet
            tail = self._events[-EVENTS_CARRIED:]
            carried.update(keep_events=True, events=tail, events_base=self._events_base + len(self._events) - len(tail))
        workflow.continue_as_new(carried)

    # --- what a client may ask and decide ---------------------------------------------------

    @workflow.query(name="state")
    def state(self) -> str:
        """The run's state as of its latest rest or effect, as its own strict JSON."""
        live = self._resting.state if self._resting is not None else self._log.live
        assert live is not None
        return live.to_json()

    @workflow.query(name="events")
    def events(self, after: int) -> dict[str, Any]:
        """
        The run's events numbered above ``after``, as JSON (kept only when the run was started with
        ``keep_events``): ``{"first": number of the first given, "events": [...]}``.
        """
        skip = max(after - self._events_base, 0)
        return {"first": self._events_base + skip + 1, "events": self._events[skip:]}

    @workflow.query(name="decisions")
    def decisions(self) -> list[dict[str, Any]]:
        """Every decision taken on this run's pauses: which, by whom, when."""
        return list(self._decisions)

    def _check(self, decision: dict[str, Any], kind: str) -> None:
        resting = self._resting
        asked = decision.get("pause_id")
        if self._decision is not None or any(d["pause_id"] == asked for d in self._decisions):
            raise _refuse("AlreadyDecided", f"pause {asked!r} was decided already; a pause is decided once")
        if resting is None or resting.stop is not Stop.AWAITING_APPROVAL:
            raise _refuse("NotPaused", "this run is not waiting for a decision")
        pause_id = resting.state.pause_id
        if asked not in (None, pause_id):
            raise _refuse(
                "AlreadyDecided", f"pause {decision.get('pause_id')!r} is not open (the open one is {pause_id!r})"
            )
        reviewer = decision.get("reviewer")
        if not isinstance(reviewer, str) or not reviewer:
            raise _refuse("BadDecision", "a decision names its reviewer (a non-empty str)")
        if kind == "answer" and "answer" not in decision:
            raise _refuse("BadAnswer", "an answer decision carries its 'answer'")
        if kind == "reply":
            self._check_reply(resting.state, decision.get("reply"))
            return
        if kind not in (
            "reject",
            "cancel",
        ):  # an answer meets its result schema; a call a person answers is never approved blank
            try:
                check_answer(self._agent.tools, resting.state, decision.get("answer", NO_ANSWER))
            except AnswerRefused as exc:
                raise _refuse("BadAnswer", exc.message) from None
        arguments = decision.get("arguments")
        if arguments is None:
            return
        if kind != "approve" or not isinstance(arguments, dict):
            raise _refuse("BadDecision", "'arguments' replaces the blocked call's arguments: an object, with approve")
        # A reviewer's edit must satisfy the contract and not be denied, or nothing is decided (as with a store).
        # A run paused by a nested run waits on that run's call: the nested agent's contract and gate judge it.
        blocked, definition = self._blocked(resting.state)
        agent = definition.agent
        # A gate doing I/O is consulted when the approval is judged, in the workflow, not here.
        gate = agent.gate if not definition.gate_does_io else (lambda call: Verdict.ask("judged on approval"))
        judgement = judge(ToolCall(blocked.call_id, blocked.name, arguments), agent.tools, gate)  # type: ignore[arg-type]
        if judgement.kind in ("invalid", "denied"):
            raise _refuse("BadDecision", f"the edited call is {judgement.kind}: {judgement.reason}")

    def _check_reply(self, state: RunState, given: Any) -> None:
        """Every call of the paused reply decided, each decision checked, as ``resume(reply=)`` checks it."""
        if self._blocked(state)[1].gate_does_io:
            raise _refuse("BadDecision", "a gate doing I/O cannot list a reply here: decide its calls one at a time")
        try:
            reply = reply_of(given)
        except ValueError as exc:
            raise _refuse("BadDecision", f"'reply': {exc}") from None
        try:
            check_reply(self._agent, state, reply)
        except AnswerRefused as exc:
            raise _refuse("BadAnswer", exc.message) from None
        except DecisionRefused as exc:
            raise _refuse(exc.kind, str(exc)) from None

    def _blocked(self, state: RunState) -> tuple[ToolCall, AgentDefinition]:
        """The call a person decides on, and the definition of the agent whose contract and gate judge it."""
        blocked, path = blocked_call(state)
        definition = self._definition
        for call_id in path[:-1]:  # each a call that runs a nested run, paused
            spec = definition.agent.tools.get(state.pending[0].name)
            if spec is None or not isinstance(spec.handler, Nested) or spec.handler.agent.name is None:
                raise _refuse("BadDecision", f"the run is paused inside call {call_id!r}, which runs no served agent")
            definition = self._chosen(definition_for(spec.handler.agent.name))
            state = state.children[call_id]
        return blocked, definition

    def _take(self, decision: dict[str, Any], kind: str) -> str:
        # Runs in order, before any await: of two decisions that both passed validation, the first wins here.
        self._check(decision, kind)
        assert self._resting is not None
        pause_id = self._resting.state.pause_id
        assert pause_id is not None
        taken = {"reason": None, **decision, "decision": kind, "pause_id": pause_id, "at": workflow.now().timestamp()}
        kept = ("decision", "pause_id", "reviewer", "at", "reason", *(("reply",) if kind == "reply" else ()))
        self._decisions.append({k: taken[k] for k in kept})
        self._decision = taken
        return pause_id

    @workflow.update(name="approve")
    def approve(self, decision: dict[str, Any]) -> str:
        """Approve the open pause (optionally with the reviewer's edited arguments); the pause id decided."""
        return self._take(decision, "approve")

    @approve.validator
    def _approvable(self, decision: dict[str, Any]) -> None:
        self._check(decision, "approve")

    @workflow.update(name="reject")
    def reject(self, decision: dict[str, Any]) -> str:
        """Reject the open pause: the call is recorded as not run, with the reviewer's reason; the pause id."""
        return self._take(decision, "reject")

    @reject.validator
    def _rejectable(self, decision: dict[str, Any]) -> None:
        self._check(decision, "reject")

    @workflow.update(name="answer")
    def answer(self, decision: dict[str, Any]) -> str:
        """Answer the open pause, a call to a tool a person answers (checked against its result schema)."""
        return self._take(decision, "answer")

    @answer.validator
    def _answerable(self, decision: dict[str, Any]) -> None:
        self._check(decision, "answer")

    @workflow.update(name="cancel")
    def cancel(self, decision: dict[str, Any]) -> str:
        """Reject the open pause with the reviewer's reason and end the run there (step_limit): no model call after."""
        return self._take(decision, "cancel")

    @cancel.validator
    def _cancellable(self, decision: dict[str, Any]) -> None:
        self._check(decision, "cancel")

    @workflow.update(name="reply")
    def reply(self, decision: dict[str, Any]) -> str:
        """Decide every call of the paused reply in one step (``reply``: call id to its decision's JSON form)."""
        return self._take(decision, "reply")

    @reply.validator
    def _reviewable(self, decision: dict[str, Any]) -> None:
        self._check(decision, "reply")
