"""
A run read for people: its transcript as a timeline of proposals, verdicts and observations, and how it ended.

Everything here is plain data built from a :class:`RunState` (and, when a
store holds the run, its effects and decisions); the templates only lay it
out. Model and tool text is kept as text: escaping is the templates' job,
and they always do it.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from agent_fsm.diagrams.path import CallRecord, TurnRecord, approved_calls, turns_of
from agent_fsm.engine import Compaction, Limits, RunState, assistant_text, blocked_call, content_text
from agent_fsm.store.records import Decision, Effect

__all__ = ["CallView", "NestedView", "TurnView", "Timeline", "timeline_of", "ending_reason", "pretty_json"]


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON text; a string that holds JSON is parsed first, any other string kept as is."""
    if isinstance(value, str):
        text: str = value
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return text
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr)


@attrs.frozen
class CallView:
    """
    One proposed call and what became of it.

    ``verdict`` is a short word for the judgement (``allowed``, ``approved``,
    ``denied``, ``invalid``, ``rejected``, ``waiting``, ``not run``, ``queued``);
    ``tone`` is how it should look (``ok``, ``bad``, ``ask``, ``idle``).
    """

    call_id: str
    name: str
    arguments: str
    verdict: str
    tone: str
    reason: str | None
    observation_kind: str | None
    observation: str | None
    edited: str | None = None  # the arguments a reviewer approved instead, when they edited the call
    nested: NestedView | None = None  # the run of another agent this call ran (an agent as a tool, a handoff)
    blocked: bool = False  # the call a paused run waits on, however deep it is nested


@attrs.frozen
class NestedView:
    """
    A run nested in a call: the agent that ran it, the call ids leading to it from the top run, its own timeline.

    ``blocked`` says the call the whole run waits on is in this run or below it.
    """

    agent: str | None
    calls: tuple[str, ...]
    run: Timeline
    blocked: bool = False


@attrs.frozen
class TurnView:
    """One model call: the prompt's size, the model's own words (its thoughts, or its answer) and its proposals."""

    number: int
    prompt_tokens: int | None
    thoughts: str | None
    calls: tuple[CallView, ...]
    failed: bool = False  # the provider gave no reply


@attrs.frozen
class Timeline:
    """A whole run for the viewer: task, turns, ending, effects and the decisions taken on its pauses."""

    run_id: str
    task: str | None
    turns: tuple[TurnView, ...]
    machine_state: str
    stop: str | None
    code: str | None
    reason: str | None
    answer: str | None
    path: tuple[str, ...]
    limits: Limits
    limits_saved: bool
    effects: tuple[Effect, ...]
    decisions: tuple[Decision, ...]
    problem: str | None = None  # the record could not be read as turns (shown instead of them)
    compactions: tuple[Compaction, ...] = ()  # what the prompt left out, compaction by compaction
    agent: str | None = None  # the agent that ran it, when it was named
    # While paused: the call ids from this run's call down to the call it waits on (more than one: a nested pause).
    blocked_path: tuple[str, ...] = ()
    unplaced: tuple[NestedView, ...] = ()  # nested runs whose call the transcript could not show


def ending_reason(state: RunState) -> str | None:
    """Why the run rests where it does, in words (None for a plain answer or a run still working)."""
    limits = state.limits or Limits()
    where = state.machine_state
    if where in ("AwaitingApproval", "AnswerRejected"):
        return state.judgement.reason if state.judgement is not None else None
    if where == "ProviderError":
        return state.fault.message if state.fault is not None else None
    if where == "StepLimit":
        return f"{state.turns} of {limits.max_turns} model calls made"
    if where == "TokenLimit":
        return f"the next prompt would exceed {limits.max_prompt_tokens} tokens"
    if where == "TimeLimit":
        return f"{state.elapsed:.3f} s of the {limits.max_seconds} s time budget spent"
    if where == "ToolEnded":  # the ending result, not the calls of its reply answered after it
        ended = next((o.content for o in reversed(state.observations) if o.kind == "result"), None)
        return ended if isinstance(ended, str) or ended is None else json.dumps(ended, ensure_ascii=False)
    if where == "ToolLimit":
        return f"{state.tool_attempts} of {limits.max_tool_calls} tool attempts made"
    if where in ("Answered", "Ready", "Proposing", "Executing", "Denied") or not state.observations:
        return None
    last = state.observations[-1].content
    return last if isinstance(last, str) else json.dumps(last, ensure_ascii=False)


def _deciders(records: list[TurnRecord], approved: set[int], decisions: tuple[Decision, ...]) -> dict[int, Decision]:
    """
    The store's decision behind each call a person approved or rejected (``id()`` of its record to it).

    Approvals and rejections are matched in order; when the counts differ (a
    decision whose process died was taken again) nothing is matched.
    """
    calls = [call for record in records for call in record.calls]
    matched: dict[int, Decision] = {}
    for kind, decided in (("approve", [id(c) for c in calls if id(c) in approved]),
                          ("reject", [id(c) for c in calls if c.rejected_by_human])):  # fmt: skip
        taken = [d for d in decisions if d.decision == kind]
        if len(taken) == len(decided):
            matched.update(zip(decided, taken, strict=True))
    return matched


def _content(value: Any) -> str:
    return value if isinstance(value, str) else pretty_json(value)


def _call_view(
    call: CallRecord, state: RunState, *, first_open: bool, approved: bool, decision: Decision | None
) -> CallView:
    observation = None if call.closed else call.observation
    base: dict[str, Any] = {"call_id": call.call_id, "name": call.name, "arguments": pretty_json(call.arguments)}
    if call.closed and call.observation is not None:
        return CallView(
            **base,
            verdict="not run",
            tone="idle",
            reason=_content(call.observation.content),
            observation_kind=None,
            observation=None,
        )
    if observation is None:
        if first_open and state.machine_state == "AwaitingApproval":
            reason = state.judgement.reason if state.judgement is not None else None
            return CallView(
                **base, verdict="waiting", tone="ask", reason=reason, observation_kind=None, observation=None
            )
        return CallView(**base, verdict="queued", tone="idle", reason=None, observation_kind=None, observation=None)
    content = _content(observation.content)
    if observation.kind == "invalid":
        return CallView(
            **base, verdict="invalid", tone="bad", reason=content, observation_kind="invalid", observation=None
        )
    if observation.kind == "denied":
        verdict = "rejected" if call.rejected_by_human else "denied"
        if decision is not None:
            content += f" (decided by {decision.reviewer})"
        return CallView(
            **base, verdict=verdict, tone="bad", reason=content, observation_kind="denied", observation=None
        )
    verdict, reason, edited = "allowed", None, None
    if approved:
        verdict, reason = "approved", "a person approved the call"
        if decision is not None:
            reason = f"{decision.reviewer} approved the call"
            if decision.arguments is not None:
                reason, edited = f"{reason} with edited arguments", pretty_json(decision.arguments)
    return CallView(
        **base,
        verdict=verdict,
        tone="ok",
        reason=reason,
        observation_kind=observation.kind,
        observation=content,
        edited=edited,
    )


def _task(state: RunState) -> str | None:
    opening = state.messages[: state.opening] if state.opening else state.messages
    task = next((m.get("content") for m in reversed(opening) if m.get("role") == "user"), None)
    if type(task) is list:  # images and files as their placeholders, never their bytes
        return content_text(task)
    return task if isinstance(task, str) else None


def timeline_of(
    state: RunState,
    *,
    run_id: str | None = None,
    effects: tuple[Effect, ...] | list[Effect] = (),
    decisions: tuple[Decision, ...] | list[Decision] = (),
) -> Timeline:
    """
    The run as a timeline; ``effects`` and ``decisions`` come from a store when it keeps the run.

    A record whose transcript and observations do not agree is still shown:
    its ending and path, with ``problem`` saying what could not be read.
    Runs nested in its calls (``state.children``) are timelines of their
    own under the call that ran them; the call a nested pause waits on
    (:func:`agent_fsm.engine.blocked_call`) is marked ``blocked`` at
    whatever depth it is.
    """
    return _timeline(state, run_id, tuple(effects), tuple(decisions), (), _blocked_path(state))


def _timeline(
    state: RunState,
    run_id: str | None,
    effects: tuple[Effect, ...],
    decisions: tuple[Decision, ...],
    within: tuple[str, ...],
    blocked: tuple[str, ...],
) -> Timeline:
    """The timeline of ``state``, nested ``within`` those call ids, waiting on the ``blocked`` path below it."""
    problem = None
    try:
        records = turns_of(state)
    except ValueError as exc:  # TraceError: an inconsistent record
        records, problem = [], str(exc)
    approved = approved_calls(state, records)
    deciders = _deciders(records, approved, tuple(decisions))
    turns = []
    first_open = True
    for record in records:
        calls = []
        for call in record.calls:
            unjudged = call.observation is None or call.closed
            view = _call_view(
                call,
                state,
                first_open=first_open and unjudged,
                approved=id(call) in approved,
                decision=deciders.get(id(call)),
            )
            calls.append(_placed(view, state, within, blocked))
            first_open = first_open and not unjudged
        thoughts = assistant_text(record.message) if record.message is not None else None
        turns.append(
            TurnView(record.number, record.prompt_tokens, thoughts or None, tuple(calls), record.message is None)
        )
    stop = state.stop
    placed = {call.call_id for turn in turns for call in turn.calls}
    unplaced = tuple(
        _nested(state, call_id, within, blocked) for call_id in sorted(state.children or {}) if call_id not in placed
    )
    return Timeline(
        run_id=run_id or state.run_id,
        task=_task(state),
        turns=tuple(turns),
        machine_state=state.machine_state,
        stop=stop.value if stop is not None else None,
        code=state.code,
        reason=ending_reason(state),
        answer=state.answer,
        path=tuple(state.path),
        limits=state.limits or Limits(),
        limits_saved=state.limits is not None,
        effects=effects,
        decisions=decisions,
        problem=problem,
        compactions=tuple(state.compactions),
        agent=state.agent,
        blocked_path=blocked,
        unplaced=unplaced,
    )


def _blocked_path(state: RunState) -> tuple[str, ...]:
    """The call ids down to the call a paused run waits on; empty when it does not wait."""
    if state.machine_state != "AwaitingApproval" or not state.pending:
        return ()
    return blocked_call(state)[1]


def _nested(state: RunState, call_id: str, within: tuple[str, ...], blocked: tuple[str, ...]) -> NestedView:
    child = state.children[call_id]
    calls = (*within, call_id)
    below = blocked[1:] if blocked[:1] == (call_id,) else ()
    return NestedView(child.agent, calls, _timeline(child, None, (), (), calls, below), blocked=bool(below))


def _placed(view: CallView, state: RunState, within: tuple[str, ...], blocked: tuple[str, ...]) -> CallView:
    """The call with the run it ran (if any) and whether the whole run waits on it."""
    nested = _nested(state, view.call_id, within, blocked) if view.call_id in (state.children or {}) else None
    here = blocked == (view.call_id,)
    if nested is None and not here:
        return view
    return attrs.evolve(view, nested=nested, blocked=here)
