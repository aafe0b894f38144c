"""
The run store's logic, written once in SQL both backends speak; a backend supplies connections and transactions.

Every write is one transaction. The checks that make the store safe with
many processes are compare-and-set updates, not reads followed by writes:
a checkpoint updates a run only while this store still owns it, a decision
only while the pause it names is open, a claim only while the run is at the
version the claimer saw. The database's row lock decides every race.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from agent_fsm.engine import Intent, RunState, ToolCall
from agent_fsm.store.errors import AlreadyDecided, RunExists, RunNotFound, RunTakenOver, SchemaError, StoreError
from agent_fsm.store.records import Decision, Effect, RunSummary, StoredRun
from agent_fsm.store.schema import MIGRATIONS, VERSION_TABLE

__all__ = ["SqlStore", "Transaction"]

_SUMMARY = "run_id, status, stop, machine_state, pause_id, reason, blocked, owner, created_at, updated_at, version"


class Transaction(Protocol):
    """One open transaction: run a statement (``?`` placeholders), read its rows or how many it changed."""

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute a write; the number of rows it changed."""

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Execute a read; its rows."""


def _status(state: RunState) -> tuple[str, str | None]:
    stop = state.stop
    if stop is None:
        return "running", None
    return ("paused" if stop.value == "awaiting_approval" else "ended"), stop.value


def _call_json(call: ToolCall) -> str:
    return json.dumps({"call_id": call.call_id, "name": call.name, "arguments": call.arguments})


def _summary(row: Sequence[Any]) -> RunSummary:
    blocked = None
    if row[6] is not None:
        data = json.loads(row[6])
        blocked = ToolCall(data["call_id"], data["name"], data["arguments"])
    return RunSummary(
        run_id=row[0],
        status=row[1],
        stop=row[2],
        machine_state=row[3],
        pause_id=row[4],
        reason=row[5],
        blocked=blocked,
        owner=row[7],
        created_at=float(row[8]),
        updated_at=float(row[9]),
        version=int(row[10]),
    )


class SqlStore:
    """
    A :class:`agent_fsm.store.RunStore` on a SQL database; subclasses connect to one.

    ``owner`` identifies this store object (and so this process) as the
    writer of the runs it begins, claims or resumes.
    """

    name = "sql"

    def __init__(self) -> None:
        self.owner = f"{os.getpid()}.{uuid.uuid4().hex[:12]}"
        # The intent each run left open in this store, closed by the run's next checkpoint.
        self._open: dict[str, Intent] = {}

    # --- what a backend supplies ------------------------------------------------

    def _transaction(self, *, write: bool = True, single: bool = False) -> AbstractContextManager[Transaction]:
        """
        One transaction; ``write=False`` for reads, which need no write lock.

        ``single``: the work is one write statement, atomic by itself (a
        backend may then skip BEGIN and COMMIT: a commit is the costly part).
        Statements run after it fails (to explain why) read only.
        """
        raise NotImplementedError("a SqlStore backend must implement '_transaction'")

    def _lock_for_migration(self, tx: Transaction) -> None:
        """Serialise migrations between processes (the backend's own lock)."""

    def _is_duplicate(self, exc: BaseException) -> bool:
        raise NotImplementedError("a SqlStore backend must implement '_is_duplicate'")

    def close(self) -> None:
        """Release the connection."""

    def __enter__(self) -> SqlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- schema ----------------------------------------------------------------------

    def migrate(self) -> int:
        """
        Bring the database's schema up to date; the version it is at.

        Raises:
            SchemaError: the database was written by a newer agent_fsm (its version is unknown here).
        """
        with self._transaction() as tx:
            self._lock_for_migration(tx)
            tx.run(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version INTEGER NOT NULL)")
            found = tx.rows(f"SELECT version FROM {VERSION_TABLE}")
            current = int(found[0][0]) if found else 0
            if current > len(MIGRATIONS):
                raise SchemaError(
                    f"the database's schema is at version {current}; this agent_fsm knows versions up to"
                    f" {len(MIGRATIONS)} (upgrade agent_fsm to open it)"
                )
            for statements in MIGRATIONS[current:]:
                for statement in statements:
                    tx.run(statement)
            if not found:
                tx.run(f"INSERT INTO {VERSION_TABLE} (version) VALUES (?)", (len(MIGRATIONS),))
            elif current < len(MIGRATIONS):
                tx.run(f"UPDATE {VERSION_TABLE} SET version = ?", (len(MIGRATIONS),))
        return len(MIGRATIONS)

    def schema_version(self) -> int:
        """The migration the database is at (0 for a database never opened as a store)."""
        with self._transaction() as tx:
            self._lock_for_migration(tx)
            tx.run(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version INTEGER NOT NULL)")
            found = tx.rows(f"SELECT version FROM {VERSION_TABLE}")
        return int(found[0][0]) if found else 0

    # --- the kernel's Checkpointer ---------------------------------------------------

    def begin(self, run_id: str, state: RunState) -> None:
        """
        Record a new run, owned by this store.

        Raises:
            RunExists: ``run_id`` is already stored.
        """
        status, stop = _status(state)
        now = time.time()
        try:
            with self._transaction(single=True) as tx:
                tx.run(
                    "INSERT INTO agent_fsm_runs (run_id, status, stop, machine_state, state, owner, created_at,"
                    " updated_at, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)",
                    (run_id, status, stop, state.machine_state, state.to_json(), self.owner, now, now),
                )
        except Exception as exc:
            if self._is_duplicate(exc):
                raise RunExists(f"a run is already stored under {run_id!r}; give each run its own id") from exc
            raise

    def save(self, run_id: str, state: RunState, intent: Intent | None = None) -> None:
        """
        Commit ``state`` (and ``intent``, the effect about to run) while this store owns the run.

        Raises:
            RunTakenOver: another store claimed the run; nothing was written.
            RunNotFound: the run was never begun.
        """
        status, stop = _status(state)
        paused = status == "paused" and bool(state.pending)
        now = time.time()
        previous = self._open.get(run_id)
        with self._transaction(single=previous is None and intent is None) as tx:
            changed = tx.run(
                "UPDATE agent_fsm_runs SET status = ?, stop = ?, machine_state = ?, state = ?, pause_id = ?,"
                " reason = ?, blocked = ?, intent = ?, updated_at = ?, version = version + 1"
                " WHERE run_id = ? AND owner = ?",
                (
                    status,
                    stop,
                    state.machine_state,
                    state.to_json(),
                    state.pause_id if paused else None,
                    state.judgement.reason if paused and state.judgement is not None else None,
                    _call_json(state.pending[0]) if paused else None,
                    json.dumps(_intent_data(intent)) if intent is not None else None,
                    now,
                    run_id,
                    self.owner,
                ),
            )
            if not changed:
                owners = tx.rows("SELECT owner FROM agent_fsm_runs WHERE run_id = ?", (run_id,))
                if not owners:
                    raise RunNotFound(f"no run is stored under {run_id!r} (begin it with run(..., store=...))")
                raise RunTakenOver(
                    f"run {run_id!r} is now held by {owners[0][0]!r}, not by this store ({self.owner!r});"
                    " it was claimed by recover() or a decision while this process was still running it"
                )
            if previous is not None:
                last = state.observations[-1] if state.observations else None
                outcome = last.kind if last is not None and last.call_id == previous.call_id else "interrupted"
                tx.run(
                    "UPDATE agent_fsm_effects SET observed_at = ?, outcome = ?"
                    " WHERE run_id = ? AND idempotency_key = ? AND observed_at IS NULL",
                    (now, outcome, run_id, previous.idempotency_key),
                )
            if intent is not None:
                tx.run(
                    "INSERT INTO agent_fsm_effects (run_id, idempotency_key, tool, call_id, fingerprint, intent_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (run_id, intent.idempotency_key, intent.tool, intent.call_id, intent.fingerprint, now),
                )
        self._open.pop(run_id, None)
        if intent is not None:
            self._open[run_id] = intent

    # --- reading ---------------------------------------------------------------------

    def load(self, run_id: str) -> StoredRun:
        """
        The run stored under ``run_id``, with its state and any intent left open.

        Raises:
            RunNotFound: nothing is stored under ``run_id``.
            StoreError: the stored state cannot be read (written by something else).
        """
        with self._transaction(write=False) as tx:
            rows = tx.rows(f"SELECT {_SUMMARY}, state, intent FROM agent_fsm_runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise RunNotFound(f"no run is stored under {run_id!r}")
        return _stored(rows[0])

    def runs(self, status: str | None = None) -> list[RunSummary]:
        """Every stored run (or those with ``status``), most recently changed first."""
        where, params = ("WHERE status = ?", (status,)) if status is not None else ("", ())
        with self._transaction(write=False) as tx:
            rows = tx.rows(f"SELECT {_SUMMARY} FROM agent_fsm_runs {where} ORDER BY updated_at DESC", params)
        return [_summary(row) for row in rows]

    def paused(self) -> list[RunSummary]:
        """The approval inbox: every run waiting for a person, with the blocked call and the reason."""
        return self.runs("paused")

    def history(self, run_id: str) -> list[Decision]:
        """The decisions taken on the run's pauses, oldest first."""
        with self._transaction(write=False) as tx:
            rows = tx.rows(
                "SELECT run_id, pause_id, decision, reviewer, reason, arguments, at FROM agent_fsm_decisions"
                " WHERE run_id = ? ORDER BY at",
                (run_id,),
            )
        return [Decision(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]) if r[5] else None, float(r[6])) for r in rows]

    def effects(self, run_id: str) -> list[Effect]:
        """Every effectful call's intent and observation, oldest first."""
        with self._transaction(write=False) as tx:
            rows = tx.rows(
                "SELECT run_id, idempotency_key, tool, call_id, fingerprint, intent_at, observed_at, outcome"
                " FROM agent_fsm_effects WHERE run_id = ? ORDER BY intent_at",
                (run_id,),
            )
        return [Effect(r[0], r[1], r[2], r[3], r[4], float(r[5]), _float(r[6]), r[7]) for r in rows]

    # --- taking a run over -------------------------------------------------------------

    def decide(
        self,
        run_id: str,
        pause_id: str,
        decision: str,
        *,
        reviewer: str,
        reason: str | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> StoredRun:
        """
        Close the open pause ``pause_id`` with a decision, atomically, and take the run over.

        Returns the run as it was paused. Exactly one of any number of
        concurrent decisions on one pause gets here; the others raise.

        Raises:
            AlreadyDecided: the pause is not open (decided already, or the run is not paused).
        """
        now = time.time()
        with self._transaction() as tx:
            won = tx.run(
                "UPDATE agent_fsm_runs SET status = 'running', owner = ?, pause_id = NULL, updated_at = ?,"
                " version = version + 1 WHERE run_id = ? AND status = 'paused' AND pause_id = ?",
                (self.owner, now, run_id, pause_id),
            )
            if won:
                tx.run(
                    "INSERT INTO agent_fsm_decisions (run_id, pause_id, decision, reviewer, reason, arguments, at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (run_id, pause_id, decision, reviewer, reason, json.dumps(arguments) if arguments else None, now),
                )
                rows = tx.rows(f"SELECT {_SUMMARY}, state, intent FROM agent_fsm_runs WHERE run_id = ?", (run_id,))
            else:
                earlier = tx.rows(
                    "SELECT decision, reviewer, at FROM agent_fsm_decisions WHERE run_id = ? AND pause_id = ?",
                    (run_id, pause_id),
                )
                current = tx.rows("SELECT status FROM agent_fsm_runs WHERE run_id = ?", (run_id,))
        if not won:
            if not current:
                raise RunNotFound(f"no run is stored under {run_id!r}")
            if earlier:
                what, who, at = earlier[0]
                raise AlreadyDecided(
                    f"pause {pause_id!r} of run {run_id!r} was decided already: {what} by {who!r}"
                    f" at {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(float(at)))} UTC"
                )
            raise AlreadyDecided(
                f"run {run_id!r} has no open pause {pause_id!r} (it is {current[0][0]}); list the inbox again"
            )
        return _stored(rows[0])

    def claim_stale(self, older_than: float) -> list[StoredRun]:
        """
        Take over every run still ``running`` whose last commit is at least ``older_than`` seconds old.

        Each claim is a compare-and-set on the run's version, so of two
        recoverers one gets each run; the process that held it, if alive,
        gets :class:`RunTakenOver` at its next checkpoint.
        """
        cutoff = time.time() - older_than
        with self._transaction(write=False) as tx:
            seen = tx.rows(
                "SELECT run_id, version FROM agent_fsm_runs WHERE status = 'running' AND updated_at <= ?"
                " ORDER BY updated_at",
                (cutoff,),
            )
        claimed = []
        for run_id, version in seen:
            with self._transaction() as tx:
                if not tx.run(
                    "UPDATE agent_fsm_runs SET owner = ?, updated_at = ?, version = version + 1"
                    " WHERE run_id = ? AND version = ? AND status = 'running'",
                    (self.owner, time.time(), run_id, version),
                ):
                    continue
                rows = tx.rows(f"SELECT {_SUMMARY}, state, intent FROM agent_fsm_runs WHERE run_id = ?", (run_id,))
            stored = _stored(rows[0])
            if stored.intent is not None:
                self._open[run_id] = stored.intent
            claimed.append(stored)
        return claimed


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _intent_data(intent: Intent) -> dict[str, str]:
    return {
        "call_id": intent.call_id,
        "tool": intent.tool,
        "fingerprint": intent.fingerprint,
        "idempotency_key": intent.idempotency_key,
    }


def _stored(row: Sequence[Any]) -> StoredRun:
    summary = _summary(row)
    try:
        state = RunState.from_json(row[11])
    except ValueError as exc:
        raise StoreError(f"the state stored for run {summary.run_id!r} cannot be read: {exc}") from exc
    intent = Intent(**json.loads(row[12])) if row[12] else None
    return StoredRun(summary, state, intent)
