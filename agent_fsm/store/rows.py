"""
A run's row: the columns a state is written to, and each read back checked.

The ``state`` column is the authority; the other columns (status, pause,
blocked call, reason) are copies a list or an inbox reads without parsing a
state. Reading a row checks that it is one run's: a state that belongs to
another run, or a blocked call the state does not hold, is refused
(:class:`DamagedRun`), so what a reviewer is shown is what an approval runs.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

import attrs

from agent_fsm.engine import RUN_MACHINE, Intent, RunState, Stop, ToolCall, blocked_call
from agent_fsm.store.errors import AlreadyDecided, DamagedRun, RunNotFound, RunTakenOver, StoreError
from agent_fsm.store.records import Checkpoint, Decision, Effect, Fork, RunSummary, StoredRun

__all__ = [
    "CHECKED",
    "CHECKPOINTS",
    "FORKS",
    "KEEP",
    "DECISIONS",
    "EFFECTS",
    "STORED",
    "SUMMARY",
    "addressed",
    "agrees",
    "belongs",
    "call_json",
    "checkpoint_of",
    "checkpoint_state",
    "fork_of",
    "continuable",
    "decision_of",
    "effect_of",
    "listed",
    "refusal",
    "float_or_none",
    "holdable",
    "intent_data",
    "lost",
    "outcome_of",
    "pause_columns",
    "status_of",
    "stored_of",
    "summary_of",
    "text_column",
]

SUMMARY = "run_id, status, stop, machine_state, pause_id, reason, blocked, owner, created_at, updated_at, version"
"""The columns of a :class:`RunSummary`, in its fields' order; ``state, intent`` follow them for a stored run."""

# What a column cannot hold as such: NUL (PostgreSQL text refuses it) and surrogates (UTF-8 cannot encode them).
_UNHOLDABLE = re.compile("[\x00\ud800-\udfff]")

STORED = (
    f"SELECT {SUMMARY}, state, intent, messages, observations, new_messages, new_observations, grown"
    " FROM agent_fsm_runs WHERE run_id = ?"
)
"""One run, as :func:`stored_of` reads it once its transcript is put back (see :mod:`.transcript`)."""

DECISIONS = (
    "SELECT run_id, pause_id, decision, reviewer, reason, arguments, at FROM agent_fsm_decisions WHERE run_id = ?"
)
"""A run's decisions, as :func:`decision_of` reads each."""

EFFECTS = (
    "SELECT run_id, idempotency_key, tool, call_id, fingerprint, intent_at, observed_at, outcome"
    " FROM agent_fsm_effects WHERE run_id = ? ORDER BY intent_at"
)
"""A run's effect records, oldest first, as :func:`effect_of` reads each."""

KEEP = (
    "INSERT INTO agent_fsm_checkpoints (run_id, point, machine_state, stop, state, messages, observations,"
    " new_messages, new_observations, grown, saved_at)"
    " SELECT ?, COALESCE(MAX(point) + 1, 0), ?, ?, ?, ?, ?, ?, ?, ?, ? FROM agent_fsm_checkpoints WHERE run_id = ?"
)
"""Keep a state as the run's next checkpoint.

Parameters: ``run_id, machine_state, stop, state, messages, observations, new_messages,
new_observations, grown, saved_at, run_id`` (see :mod:`.transcript`).

Numbered inside the commit's own transaction, after the compare-and-set on
the run's row: commits of one run are serialised, so the numbers are too.
"""

CHECKPOINTS = (
    "SELECT run_id, point, machine_state, stop, saved_at FROM agent_fsm_checkpoints WHERE run_id = ? ORDER BY point"
)
"""A run's checkpoints, as :func:`checkpoint_of` reads each."""

FORKS = "SELECT run_id, parent, point, forked_at FROM agent_fsm_forks"
"""Fork records, as :func:`fork_of` reads each (add a ``WHERE``)."""

CHECKED = (
    "SELECT owner, status, version, intent, state, messages, observations, new_messages, new_observations, grown"
    " FROM agent_fsm_runs WHERE run_id = ?"
)
"""What a commit that was refused, or that continues a run from a new state object, is checked against."""


def _status(stop: Stop | None) -> tuple[str, str | None]:
    if stop is None:
        return "running", None
    return ("paused" if stop.value == "awaiting_approval" else "ended"), stop.value


# Every machine state's status and stop, looked up once: a commit reads them two or three times.
_STATUSES = {spec.name: _status(RUN_MACHINE.stop_of(spec.name)) for spec in RUN_MACHINE.states}


def status_of(state: RunState) -> tuple[str, str | None]:
    found = _STATUSES.get(state.machine_state)
    return found if found is not None else _status(state.stop)  # an unknown state: as the state itself says


def call_json(call: ToolCall, path: Sequence[str] = ()) -> str:
    data: dict[str, Any] = {"call_id": call.call_id, "name": call.name, "arguments": call.arguments}
    if len(path) > 1:  # a nested run's call: the call ids from the run's own call down to it
        data["path"] = list(path)
    return json.dumps(data)


def pause_columns(state: RunState) -> tuple[str | None, str | None]:
    """
    The ``reason`` and ``blocked`` columns of a run resting in ``state``: the innermost call a person decides.

    A run paused because a run nested in its call paused waits on that
    nested run's call (:func:`agent_fsm.engine.blocked_call`), so the inbox
    shows that call, with the path of calls down to it, and the reason its
    own gate gave; a run not paused has neither.
    """
    if state.machine_state != "AwaitingApproval" or not state.pending:
        return None, None
    call, path = blocked_call(state)
    judged = state
    for call_id in path[:-1]:
        judged = judged.children[call_id]
    reason = judged.judgement.reason if judged.judgement is not None else None
    return text_column(reason), call_json(call, path)


def addressed(intent: Intent) -> str:
    """The call id an effect is recorded under: a nested run's call with the calls leading to it (``t0/r1``)."""
    return f"{intent.path}/{intent.call_id}" if intent.path else intent.call_id


def outcome_of(state: RunState, intent: Intent) -> str:
    """
    What became of ``intent``'s call as ``state`` records it: its observation's kind, or ``interrupted``.

    The call of a nested run (``intent.path``) is observed in that run's
    state, which ``state`` holds under the calls of the path.
    """
    for call_id in intent.path.split("/") if intent.path else ():
        child = state.children.get(call_id) if state.children else None
        if child is None:
            return "interrupted"
        state = child
    last = state.observations[-1] if state.observations else None
    return last.kind if last is not None and last.call_id == intent.call_id else "interrupted"


def summary_of(row: Sequence[Any]) -> RunSummary:
    """The :data:`SUMMARY` columns read, each checked for the type this store writes.

    Raises:
        DamagedRun: a column holds something else (written by another program).
    """
    try:
        blocked = None
        path: tuple[str, ...] = ()
        if row[6] is not None:
            data = json.loads(row[6])
            blocked = ToolCall(data["call_id"], data["name"], data["arguments"])
            if not (isinstance(blocked.call_id, str) and isinstance(blocked.name, str)):
                raise TypeError("the call id and the tool name must be text")
            if not isinstance(blocked.arguments, dict | None):
                raise TypeError("the arguments must be an object")
            path = tuple(data.get("path", [blocked.call_id]))
            if not all(isinstance(step, str) for step in path) or path[-1:] != (blocked.call_id,):
                raise TypeError("the path must be the call ids down to the blocked call")
        summary = RunSummary(
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5],
            blocked,
            row[7],
            _number(row[8]),
            _number(row[9]),
            _count(row[10]),
            blocked_path=path,
        )
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
        raise DamagedRun(f"the row of run {row[0]!r} cannot be read: {type(exc).__name__}: {exc}") from exc
    if not all(isinstance(text, str | None) for text in row[:6]):
        raise DamagedRun(f"the row of run {row[0]!r} cannot be read: a text column holds something else")
    return summary


def listed(row: Sequence[Any]) -> RunSummary:
    """A summary for a list: an unreadable row is one broken summary (``problem`` says why), not a broken list."""
    try:
        return summary_of(row)
    except DamagedRun as exc:
        return RunSummary(str(row[0]), "damaged", None, "?", None, None, None, None, 0.0, 0.0, 0, problem=str(exc))


def _number(value: Any) -> float:
    if type(value) not in (int, float) or value != value:
        raise TypeError(f"a time must be a number of seconds (got {value!r})")
    return float(value)


def _count(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"a version must be an integer (got {value!r})")
    return value


def decision_of(row: Sequence[Any]) -> Decision:
    """A row of the decisions table (``run_id, pause_id, decision, reviewer, reason, arguments, at``)."""
    try:
        arguments = json.loads(row[5]) if row[5] else None
        if not isinstance(arguments, dict | None):
            raise TypeError("the edited arguments must be an object")
        return Decision(row[0], row[1], row[2], row[3], row[4], arguments, _number(row[6]))
    except (ValueError, TypeError, RecursionError) as exc:
        raise DamagedRun(f"a decision stored for run {row[0]!r} cannot be read: {exc}") from exc


def effect_of(row: Sequence[Any]) -> Effect:
    """A row of the effects table (intent, then observation)."""
    try:
        observed = None if row[6] is None else _number(row[6])
        return Effect(row[0], row[1], row[2], row[3], row[4], _number(row[5]), observed, row[7])
    except (ValueError, TypeError) as exc:
        raise DamagedRun(f"an effect stored for run {row[0]!r} cannot be read: {exc}") from exc


def checkpoint_of(row: Sequence[Any]) -> Checkpoint:
    """A row of :data:`CHECKPOINTS`."""
    try:
        if type(row[1]) is not int or not isinstance(row[2], str) or not isinstance(row[3], str | None):
            raise TypeError("the point, machine state or ending holds something else")
        return Checkpoint(row[0], row[1], row[2], row[3], _number(row[4]))
    except (ValueError, TypeError) as exc:
        raise DamagedRun(f"a checkpoint stored for run {row[0]!r} cannot be read: {exc}") from exc


def checkpoint_state(run_id: str, point: int, text: Any) -> RunState:
    """The state kept at checkpoint ``point`` of ``run_id``, read strictly and checked to be that run's."""
    try:
        if not isinstance(text, str):
            raise TypeError(f"the state column holds {type(text).__name__}")
        state = RunState.from_json(text)
    except (ValueError, TypeError, RecursionError) as exc:
        raise DamagedRun(f"checkpoint {point} of run {run_id!r} cannot be read: {exc}") from exc
    if state.run_id != run_id:
        raise DamagedRun(
            f"checkpoint {point} of run {run_id!r} is run {state.run_id!r}'s: the row was written by something"
            " other than this store"
        )
    return state


def fork_of(row: Sequence[Any]) -> Fork:
    """A row of :data:`FORKS`."""
    try:
        if type(row[2]) is not int or not isinstance(row[1], str):
            raise TypeError("the parent or the point holds something else")
        return Fork(row[0], row[1], row[2], _number(row[3]))
    except (ValueError, TypeError) as exc:
        raise DamagedRun(f"the fork record of run {row[0]!r} cannot be read: {exc}") from exc


def float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def intent_data(intent: Intent) -> dict[str, str]:
    data = {
        "call_id": intent.call_id,
        "tool": intent.tool,
        "fingerprint": intent.fingerprint,
        "idempotency_key": intent.idempotency_key,
    }
    if intent.path:  # a call of a nested run: which calls lead down to it
        data["path"] = intent.path
    return data


def belongs(run_id: str, state: RunState) -> None:
    if state.run_id != run_id:
        raise DamagedRun(
            f"a state of run {state.run_id!r} cannot be committed as run {run_id!r}; nothing was written", state=state
        )


def holdable(text: str) -> bool:
    """Whether a column holds ``text`` as it is (no NUL, no lone surrogate)."""
    return _UNHOLDABLE.search(text) is None


def text_column(text: str | None) -> str | None:
    """
    ``text`` as a column holds it: NUL and surrogates written as the saved JSON escapes them (``\\u0000``).

    Model text may hold both (JSON carries them), and a commit must never
    fail on it. The escape is the state column's own, which keeps the exact text.
    """
    if text is None or _UNHOLDABLE.search(text) is None:
        return text
    return _UNHOLDABLE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def lost(
    run_id: str, pause_id: str, earlier: Sequence[Sequence[Any]], current: Sequence[Sequence[Any]]
) -> StoreError | AlreadyDecided:
    """Why a decision on ``pause_id`` lost: the decision taken ``earlier`` on it, else the run's ``current`` status."""
    if not current:
        return RunNotFound(f"no run is stored under {run_id!r}")
    if earlier:
        what, who, at = earlier[0][2], earlier[0][3], earlier[0][6]
        return AlreadyDecided(
            f"pause {pause_id!r} of run {run_id!r} was decided already: {what} by {who!r}"
            f" at {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(float(at)))} UTC"
        )
    return AlreadyDecided(
        f"run {run_id!r} has no open pause {pause_id!r} (it is {current[0][0]}); list the inbox again"
    )


def refusal(run_id: str, rows: Sequence[Sequence[Any]], owner: str, state: RunState) -> StoreError | AlreadyDecided:
    """Why a commit of ``state`` by the store ``owner`` is refused, given the run's :data:`CHECKED` row."""
    if not rows:
        return RunNotFound(f"no run is stored under {run_id!r} (begin it with run(..., store=...))", state=state)
    if rows[0][0] != owner:
        return RunTakenOver(
            f"run {run_id!r} is now held by {rows[0][0]!r}, not by this store ({owner!r});"
            " it was claimed by recover() or a decision while this process was still running it",
            state=state,
        )
    return AlreadyDecided(
        f"run {run_id!r} was committed by another decision since this state was read (it is at version"
        f" {rows[0][2]}); this copy decides nothing, and nothing was written",
        state=state,
    )


def continuable(run_id: str, rows: Sequence[Sequence[Any]], owner: str, state: RunState) -> int:
    """
    The stored version a new state object may be committed over, given the run's :data:`CHECKED` row.

    It must continue the stored state itself: the run not ended, no effect
    in flight, and its record extending the stored one. An older copy is refused.
    """
    if not rows or rows[0][0] != owner:
        raise refusal(run_id, rows, owner, state)
    _, status, version, intent, text = rows[0][:5]
    try:
        stored = RunState.from_json(text)
    except (ValueError, RecursionError) as exc:
        raise DamagedRun(f"the state stored for run {run_id!r} cannot be read: {exc}", state=state) from exc
    if status == "ended" or intent is not None or not continues(stored, state):
        moved = "has ended" if status == "ended" else "has an effect in flight" if intent else "has moved on"
        raise AlreadyDecided(
            f"the state committed for run {run_id!r} is not its latest: the stored run {moved} (version"
            f" {version}); a stale copy decides nothing, and nothing was written",
            state=state,
        )
    return int(version)


def continues(stored: RunState, state: RunState) -> bool:
    """Whether ``state`` is ``stored`` or a later point of the same run (its record extends the stored one)."""
    seen, observed = len(stored.messages), len(stored.observations)
    return (
        len(state.messages) >= seen
        and len(state.observations) >= observed
        and state.tool_attempts >= stored.tool_attempts
        and state.turns >= stored.turns
        and state.observations[:observed] == stored.observations
        and state.messages[:seen] == stored.messages
    )


def agrees(stored: StoredRun, pause_id: str, blocked: Any) -> None:
    """The paused row's parts are one run's: its state is paused at ``pause_id`` on the call the row shows."""
    state, run_id = stored.state, stored.run_id
    if state.machine_state != "AwaitingApproval" or state.pause_id != pause_id or not state.pending:
        raise DamagedRun(
            f"the state stored for run {run_id!r} is not paused at pause {pause_id!r}: the row was written by"
            " something other than this store; nothing was decided"
        )
    if blocked != pause_columns(state)[1]:
        raise DamagedRun(
            f"the blocked call stored for run {run_id!r} is not the call its state would run: the row was written"
            " by something other than this store; nothing was decided"
        )


def stored_of(row: Sequence[Any]) -> StoredRun:
    summary = summary_of(row)
    try:
        state = RunState.from_json(row[11])
    except (ValueError, RecursionError) as exc:
        raise DamagedRun(f"the state stored for run {summary.run_id!r} cannot be read: {exc}") from exc
    if state.run_id != summary.run_id:
        raise DamagedRun(
            f"the state stored for run {summary.run_id!r} is run {state.run_id!r}'s: the row was written by"
            " something other than this store"
        )
    try:
        intent = Intent(**json.loads(row[12])) if row[12] else None
        if intent is not None and not all(isinstance(v, str) for v in attrs.astuple(intent)):
            raise TypeError("every field of an intent is text")
    except (ValueError, TypeError, RecursionError) as exc:
        raise DamagedRun(f"the intent stored for run {summary.run_id!r} cannot be read: {exc}") from exc
    return StoredRun(summary, state, intent)
