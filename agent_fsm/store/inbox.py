"""
The approval inbox: decide a stored pause from any process, exactly once.

A decision is a compare-and-set on the pause's id (:meth:`RunStore.decide`):
of two people (or two processes) deciding the same pause at once, exactly
one wins and continues the run; the other gets :class:`AlreadyDecided`.
Who decided and when is kept in the run's history.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any

from agent_fsm import Agent
from agent_fsm.engine import (
    NO_ANSWER,
    OUTCOME_UNKNOWN,
    CallDecision,
    EventSink,
    Nested,
    RunResult,
    RunState,
    ToolCall,
    blocked_call,
    check_answer,
    check_reply,
    deny_effects,
    judge,
    refuse_ungated,
    reply_data,
    reply_of,
)
from agent_fsm.store.errors import AlreadyDecided
from agent_fsm.store.protocol import RunStore
from agent_fsm.store.records import StoredRun

__all__ = ["DifferentAgent", "agent_mismatch", "answer", "approve", "cancel", "decide_reply", "reject", "reply_of"]


class DifferentAgent(UserWarning):
    """A pause is decided by an agent other than the one that paused it (its name or its tool contracts differ).

    The decision is still judged afresh by the deciding agent's gate against
    its own contracts; the warning says so, since a reviewer may have meant
    the agent that paused the run.
    """


def agent_mismatch(state: RunState, agent: Agent) -> str | None:
    """What differs between the agent that paused ``state`` and ``agent`` (None: the same name and contracts)."""
    paused_as, digest = state.agent, state.agent_digest
    if paused_as is None and digest is None:
        return None  # a state saved before runs named their agents: nothing to compare
    same_name = paused_as == agent.name
    same_contracts = digest is None or digest == agent.digest
    if same_name and same_contracts:
        return None
    said = []
    if not same_name:
        said.append(f"paused by agent {paused_as!r}, decided by agent {agent.name!r}")
    if not same_contracts:
        said.append(f"its tool contracts differ ({(digest or '')[:12]} then, {agent.digest[:12]} now)")
    return f"run {state.run_id!r} was " + "; ".join(said) + ": the call is judged afresh by the deciding agent"


def _open_pause(store: RunStore, run_id: str, agent: Agent, pause_id: str | None, reviewer: str) -> StoredRun:
    # Checked before anything is decided: a decision committed for what cannot carry it out strands the run.
    if not isinstance(agent, Agent):
        raise TypeError(f"'agent' must be an Agent (got {agent!r} that is a {type(agent).__name__}).")
    if not isinstance(reviewer, str) or not reviewer.strip():
        raise ValueError(f"a decision needs the reviewer's name (a non-empty str, got {reviewer!r})")
    stored = store.load(run_id)
    current = stored.summary.pause_id
    if stored.status != "paused" or current is None:
        raise AlreadyDecided(f"run {run_id!r} is {stored.status}, not waiting for a decision")
    if pause_id is not None and pause_id != current:
        raise AlreadyDecided(f"pause {pause_id!r} of run {run_id!r} is not open (the open one is {current!r})")
    note = agent_mismatch(stored.state, agent)
    if note is not None:
        warnings.warn(note, DifferentAgent, stacklevel=3)
    return stored


def _blocked(state: RunState, agent: Agent) -> tuple[ToolCall, Agent]:
    """
    The call a person decides on and the agent whose contract and gate judge it.

    A run paused by a run nested in its call waits on the nested run's call
    (:func:`agent_fsm.engine.blocked_call`): that call is judged by the agent
    the nesting tool runs, found by following the tools down the path.
    """
    call, path = blocked_call(state)
    for call_id in path[:-1]:
        spec = agent.tools.get(state.pending[0].name)
        handler = spec.handler if spec is not None else None
        if not isinstance(handler, Nested):
            break  # not this agent's nesting tool: judged by resume, which refuses what does not fit
        agent, state = handler.agent, state.children[call_id]
    return call, agent


def approve(
    store: RunStore,
    run_id: str,
    agent: Agent,
    *,
    reviewer: str,
    arguments: Mapping[str, Any] | None = None,
    pause_id: str | None = None,
    on_event: EventSink | None = None,
) -> RunResult:
    """
    Approve the stored run's blocked call, and continue the run here, as ``agent``, until it rests again.

    ``agent`` judges the call afresh (its tools and gate) and runs on;
    ``agent.limits=None`` keeps the limits saved with the run. ``arguments``
    replaces the call's arguments (a reviewer's edit): the edited call must
    satisfy its tool's contract and must not be denied by the agent's gate,
    or nothing is decided. A run paused by a nested run's call (the inbox's
    ``blocked_path``) is approved at the top: the decision goes down, the
    nested run resumes, then the run; an edit is of the nested call, held
    to the nested agent's contract and gate. ``pause_id`` (from the inbox) makes sure the
    pause approved is the one the reviewer saw; ``on_event`` is told the continued run's events.

    Raises:
        AlreadyDecided: the pause was decided by someone else first, or is not open.
        UngatedApproval: the call is effectful and the agent deciding it has no gate (nothing is decided).
        AnswerRefused: the call is one a person answers (use :func:`answer`); nothing is decided.
        ValueError: no reviewer was named, or the edited call is invalid or denied.
        TypeError: ``agent`` is not an :class:`~agent_fsm.Agent` (nothing is decided).
    """
    stored = _open_pause(store, run_id, agent, pause_id, reviewer)
    check_answer(agent.tools, stored.state, NO_ANSWER)  # a call a person answers is never approved blank
    refuse_ungated(agent, stored.state)  # before the decision is recorded: it could not be carried out
    edited = None
    if arguments is not None:
        call, deciding = _blocked(stored.state, agent)
        edited = ToolCall(call.call_id, call.name, dict(arguments), json.dumps(dict(arguments), default=repr))
        tools, gate = deciding.tools, deciding.gate
        judgement = judge(edited, tools, gate if gate is not None else deny_effects(tools))
        if judgement.kind in ("invalid", "denied"):
            raise ValueError(f"the edited call cannot be approved: {judgement.kind}: {judgement.reason}")
    decided = store.decide(
        run_id,
        stored.summary.pause_id or "",
        "approve",
        reviewer=reviewer,
        arguments=dict(arguments) if arguments is not None else None,
    )
    return agent.resume(
        decided.state,
        approve=True,
        arguments=edited.arguments if edited is not None else None,  # judged afresh by resume, too
        store=store,
        run_id=run_id,
        on_event=on_event,
    )


def reject(
    store: RunStore,
    run_id: str,
    agent: Agent,
    *,
    reviewer: str,
    reason: str,
    pause_id: str | None = None,
    on_event: EventSink | None = None,
) -> RunResult:
    """
    Reject the stored run's blocked call (the model is told ``reason``), and continue the run here, as ``agent``.

    A call whose outcome was unknown after a crash is recorded as not run; ``on_event`` is told the run's events.

    Raises:
        AlreadyDecided: the pause was decided by someone else first, or is not open.
        ValueError: no reviewer was named.
        TypeError: ``agent`` is not an :class:`~agent_fsm.Agent` (nothing is decided).
    """
    stored = _open_pause(store, run_id, agent, pause_id, reviewer)
    decided = store.decide(run_id, stored.summary.pause_id or "", "reject", reviewer=reviewer, reason=reason)
    told = reason
    if (stored.summary.reason or "").startswith(OUTCOME_UNKNOWN):
        told = f"recorded as not run ({reason or 'no reason given'})"
    return agent.resume(decided.state, approve=False, reason=told, store=store, run_id=run_id, on_event=on_event)


def cancel(
    store: RunStore,
    run_id: str,
    agent: Agent,
    *,
    reviewer: str,
    reason: str = "",
    pause_id: str | None = None,
    on_event: EventSink | None = None,
) -> RunResult:
    """
    Cancel the stored paused run: it ends ``cancelled`` here, as ``agent`` (see :meth:`agent_fsm.Agent.cancel`).

    Decided once, like any decision, and recorded as ``cancel`` with the
    reviewer and ``reason``; the call it waited on is answered as not run and
    no model call is made. ``on_event`` is told the run's events.

    Raises:
        AlreadyDecided: the pause was decided by someone else first, or is not open.
        ValueError: no reviewer was named.
        TypeError: ``agent`` is not an :class:`~agent_fsm.Agent` (nothing is decided).
    """
    stored = _open_pause(store, run_id, agent, pause_id, reviewer)
    decided = store.decide(run_id, stored.summary.pause_id or "", "cancel", reviewer=reviewer, reason=reason)
    return agent.cancel(decided.state, by=reviewer, reason=reason, store=store, run_id=run_id, on_event=on_event)


def answer(
    store: RunStore,
    run_id: str,
    agent: Agent,
    *,
    reviewer: str,
    answer: Any,
    pause_id: str | None = None,
    on_event: EventSink | None = None,
) -> RunResult:
    """
    Answer the stored run's blocked call, a call to a tool a person answers, and continue the run here as ``agent``.

    The answer is checked against the tool's result schema before anything is
    decided: a wrong answer raises :class:`~agent_fsm.AnswerRefused` and the
    pause stays open. The decision is recorded as ``answer``, with the reviewer
    and the answer given (``{"answer": VALUE}`` in its ``arguments``).

    Raises:
        AnswerRefused: the answer does not meet the result schema, or the call is not a person's to answer.
        AlreadyDecided: the pause was decided by someone else first, or is not open.
        ValueError: no reviewer was named.
        TypeError: ``agent`` is not an :class:`~agent_fsm.Agent` (nothing is decided).
    """
    stored = _open_pause(store, run_id, agent, pause_id, reviewer)
    check_answer(agent.tools, stored.state, answer)
    decided = store.decide(
        run_id, stored.summary.pause_id or "", "answer", reviewer=reviewer, arguments={"answer": answer}
    )
    return agent.resume(decided.state, answer=answer, store=store, run_id=run_id, on_event=on_event)


def decide_reply(
    store: RunStore,
    run_id: str,
    agent: Agent,
    *,
    reviewer: str,
    reply: Mapping[str, CallDecision],
    pause_id: str | None = None,
    on_event: EventSink | None = None,
) -> RunResult:
    """
    Decide every call of the stored run's paused reply at once (see :meth:`agent_fsm.Agent.reply_review`),
    and continue the run here as ``agent``; one decision record, ``reply``, holds each call's decision.

    Every decision is checked before anything is decided: a partial one (a call of the reply left undecided,
    or one that awaits nobody) and a wrong answer are refused, the pause left open.

    Raises:
        DecisionRefused: the decisions are partial (kind ``PartialDecision``) or an answer is wrong.
        AlreadyDecided: the pause was decided by someone else first, or is not open.
        ValueError: no reviewer was named.
    """
    stored = _open_pause(store, run_id, agent, pause_id, reviewer)
    check_reply(agent, stored.state, reply)
    calls = reply_data(reply)
    decided = store.decide(run_id, stored.summary.pause_id or "", "reply", reviewer=reviewer, arguments=calls)
    return agent.resume(decided.state, reply=reply, store=store, run_id=run_id, on_event=on_event)
