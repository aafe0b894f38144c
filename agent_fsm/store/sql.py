"""
The run store's logic, written once in SQL both backends speak; a backend supplies connections and transactions.

Every write is one transaction. The checks that make the store safe with
many processes are compare-and-set updates, not reads followed by writes:
a checkpoint updates a run only while this store still owns it, a decision
only while the pause it names is open, a claim only while the run is at the
version the claimer saw. The database's row lock decides every race.

The store, not a state a caller holds, is the authority on a stored run:
every commit compare-and-sets the version this store last read or wrote. A
state object it has not committed (a resumed copy) continues the run only
from the stored state itself (see :func:`agent_fsm.store.rows.continuable`):
an older copy, resumed after its pause was decided, is refused before any effect runs.
"""

from __future__ import annotations

import json
import operator
import os
import time
import uuid
import weakref
from contextlib import AbstractContextManager
from typing import Any

import attrs

from agent_fsm.engine import GROWING, Intent, RunState, StateWriter
from agent_fsm.store.errors import (
    AlreadyDecided,
    DamagedRun,
    RunExists,
    RunNotFound,
    StoreError,
)
from agent_fsm.store.forks import forked_state
from agent_fsm.store.listing import (
    CLAIM_SECONDS,
    PausedFilter,
    PausedPage,
    claim_in,
    claim_of,
    inbox_columns,
    page_in,
    release_in,
)
from agent_fsm.store.protocol import Transaction
from agent_fsm.store.records import Checkpoint, Claim, Decision, Effect, Fork, RunSummary, StoredRun
from agent_fsm.store.rows import (
    CHECKED,
    CHECKPOINTS,
    DECISIONS,
    EFFECTS,
    FORKS,
    KEEP,
    STORED,
    SUMMARY,
    addressed,
    agrees,
    belongs,
    checkpoint_of,
    checkpoint_state,
    continuable,
    decision_of,
    effect_of,
    fork_of,
    holdable,
    intent_data,
    listed,
    lost,
    outcome_of,
    pause_columns,
    refusal,
    status_of,
    stored_of,
    text_column,
)
from agent_fsm.store.schema import MIGRATIONS, migrate, migrated
from agent_fsm.store.transcript import grown, grown_counts, whole

__all__ = ["SqlStore", "Transaction"]  # Transaction is re-exported for the backends


# Per growing list (GROWING, in order): how many items were stored and the last of them (None for none).
_Written = tuple[tuple[int, Any], ...]
_lists = operator.attrgetter(*GROWING)


@attrs.define
class _Held:
    """The version this store last read or wrote for a run, and the state object its commits continue."""

    version: int
    # None right after a decision or a claim: the next state committed continues the run.
    state: weakref.ref[RunState] | None
    # How many items of each growing list were stored when that state object was last committed, with the
    # last of each, and how many of each the run's latest checkpoint holds: its next commit writes what
    # follows those (see .transcript).
    written: _Written | None = None
    kept: tuple[int, ...] = (0,) * len(GROWING)
    # The run's state as last written, field by field: a commit encodes only the fields that changed.
    writer: StateWriter = attrs.field(factory=StateWriter)


# A row's columns of its growing lists: messages, observations, new_messages, new_observations, grown.
_Columns = tuple[Any, Any, Any, Any, Any]
_WHOLE: _Columns = (None, None, None, None, None)
_NOTHING = (0,) * len(GROWING)  # what a checkpoint before the first holds of each list


def _what(
    state: RunState, since: tuple[int, ...] | None, writer: StateWriter
) -> tuple[str, tuple[int, ...], _Columns, _Columns]:
    """
    What a commit writes of ``state`` whose latest checkpoint holds the first ``since`` items of each growing list.

    The state's text without its growing lists (``writer`` encodes only the
    fields changed since it last wrote the run), their lengths, the columns
    holding the items added since that checkpoint, and the run's row's
    columns if this commit is a checkpoint (the lengths, nothing added since
    it); or, when ``since`` is ``None`` (what is stored is not the start of
    ``state``'s lists), the whole state's text and no pieces: a whole row,
    which later commits continue.
    """
    lengths = tuple(map(len, _lists(state)))
    if since is None:
        return state.to_json(), lengths, _WHOLE, _WHOLE
    added = writer.added(state, *since)
    kept, rest = grown(lengths[2:], added[2:])
    return (
        writer.bare(state),
        lengths,
        (lengths[0], lengths[1], added[0], added[1], kept),
        (lengths[0], lengths[1], "", "", rest),
    )


# A run's row at a checkpoint holds this instead of its state: the state is the latest checkpoint's, kept in
# the same commit (migration 5). Writing it once, not into both rows, keeps the run's row small: an update
# rewrites one page, not a row that spills over and splits pages.
_AT_CHECKPOINT = ""


def _row_text(text: str, columns: _Columns) -> str:
    """What the run's row holds of a state also kept as its latest checkpoint: nothing, unless it is kept whole."""
    return text if columns[0] is None else _AT_CHECKPOINT


def _written(state: RunState) -> _Written:
    """
    What tells the next commit of the same state object that its lists continue what is stored: a mark per list.

    The engine only appends to a run's growing lists (at most taking their
    last item back, or replacing it, before it commits again), so a list
    holding as many items as were stored, its last the very object stored
    last, continues them: checked in constant time, not item by item (a
    commit's cost must not grow with the run's length).
    """
    marks = []
    for items in _lists(state):  # one loop, not a generator: a commit pays for no frame per list
        marks.append((len(items), items[-1] if items else None))
    return tuple(marks)


def _continues(state: RunState, marks: _Written) -> bool:
    """Whether each of ``state``'s lists holds at least its mark's count of items, the last of them the one marked."""
    for items, (count, last) in zip(_lists(state), marks, strict=True):
        if len(items) < count or (count and items[count - 1] is not last):
            return False
    return True


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
        # Per run in flight here: the version each commit compare-and-sets on.
        self._held: dict[str, _Held] = {}

    # --- what a backend supplies ------------------------------------------------

    _skip_locked = ""
    """What ends a select of rows to claim so that rows another transaction holds are passed over
    (PostgreSQL's ``FOR UPDATE SKIP LOCKED``; nothing where one writer at a time holds the whole store)."""

    _lock_row = ""
    """What ends the read of a run's row that a write transaction goes on from, so that no commit lands before the
    reads that follow it (PostgreSQL's ``FOR UPDATE``: its statements each see the latest commits; nothing where
    one writer at a time holds the whole store)."""

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
            return migrate(tx, MIGRATIONS)

    def schema_version(self) -> int:
        """The migration the database is at (0 for a database never opened as a store)."""
        with self._transaction() as tx:
            self._lock_for_migration(tx)
            return migrated(tx)

    # --- the kernel's Checkpointer ---------------------------------------------------

    def begin(self, run_id: str, state: RunState) -> None:
        """
        Record a new run, owned by this store.

        Raises:
            RunExists: ``run_id`` is already stored.
            DamagedRun: ``state`` belongs to another run (its ``run_id`` differs).
            ValueError: ``run_id`` holds NUL or a lone surrogate (no database can look it up as given).
        """
        if not holdable(run_id):
            raise ValueError(
                f"a stored run's id must be text a database can hold (no NUL, no lone surrogate): {run_id!r}"
            )
        belongs(run_id, state)
        status, stop = status_of(state)
        now = time.time()
        writer = StateWriter()
        text, lengths, columns, at_rest = _what(state, _NOTHING, writer)
        try:
            with self._transaction() as tx:
                tx.run(
                    "INSERT INTO agent_fsm_runs (run_id, status, stop, machine_state, state, messages, observations,"
                    " new_messages, new_observations, grown, owner, created_at, updated_at, version)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                    (
                        *(run_id, status, stop, state.machine_state, _row_text(text, columns)),
                        *(*at_rest, self.owner, now, now),  # nothing added since checkpoint 0
                    ),
                )
                tx.run(KEEP, (run_id, state.machine_state, stop, text, *columns, now, run_id))
        except StoreError as exc:
            if self._is_duplicate(exc):
                raise RunExists(f"a run is already stored under {run_id!r}; give each run its own id") from exc
            exc.state = exc.state or state
            raise
        self._held[run_id] = _Held(1, weakref.ref(state), _written(state), lengths, writer)

    def _stored(self, tx: Transaction, run_id: str) -> list[tuple[Any, ...]]:
        """The :data:`STORED` row of ``run_id`` (none if no such run) with its lists put back."""
        rows = tx.rows(STORED, (run_id,))
        if not rows:
            return rows
        row = rows[0]
        return [(*row[:11], self._whole(tx, run_id, row[11], row[13], row[15:18]), row[12])]

    @staticmethod
    def _whole(tx: Transaction, run_id: str, text: Any, count: Any, rest: Any = None, point: int | None = None) -> Any:
        """
        A stored state's text with its lists put back: the run's (``rest``: its row's pieces) or checkpoint ``point``'s.

        Read from the run's checkpoints up to it, each row's state only where
        it holds lists whole (see :func:`agent_fsm.store.transcript.whole`).

        Raises:
            DamagedRun: a piece is missing or not text (written by something other than this store).
        """
        if count is None:  # kept whole
            return text
        below = "" if point is None else " AND point <= ?"
        rows = tx.rows(
            "SELECT point, messages, new_messages, new_observations, grown, CASE WHEN grown IS NULL THEN state END"
            f" FROM agent_fsm_checkpoints WHERE run_id = ?{below} ORDER BY point",
            (run_id,) if point is None else (run_id, point),
        )
        gap = next((n for n, row in enumerate(rows) if row[0] != n), None)  # each checkpoint holds its piece
        if gap is not None:
            raise DamagedRun(f"the state stored for run {run_id!r} cannot be read: its checkpoint {gap} is missing")
        chain = [row[1:] for row in rows]
        if point is not None:
            chain[-1] = (*chain[-1][:4], text)
        elif text == _AT_CHECKPOINT:  # the run's row at a checkpoint: the state is that checkpoint's
            # None left, or the latest gone (it held the row's messages; one committed since is longer, not shorter).
            if not rows or type(rows[-1][1]) is not int or rows[-1][1] < count:
                raise DamagedRun(f"the state stored for run {run_id!r} cannot be read: its checkpoint is missing")
            if chain[-1][4] is None:
                found = tx.rows(
                    "SELECT state FROM agent_fsm_checkpoints WHERE run_id = ? AND point = ?", (run_id, rows[-1][0])
                )
                chain[-1] = (*chain[-1][:4], found[0][0] if found else None)
        else:  # an effect in flight: the run's row holds what was added since its latest checkpoint
            chain.append((count, *rest, text))
        try:
            return whole(chain)
        except DamagedRun as exc:
            raise DamagedRun(f"the state stored for run {run_id!r} cannot be read: {exc}") from exc

    def _since(self, tx: Transaction, run_id: str, state: RunState, held: _Held | None) -> tuple[int, ...] | None:
        """
        How many items of each growing list the run's latest checkpoint holds, if ``state`` starts with what is stored.

        ``None``: the stored run's row is whole, or what is stored is not the
        start of ``state``'s lists (a message was replaced since), or the
        latest checkpoint was written before migration 8: the commit then
        writes the state whole, and the commits after it add to that.
        """
        if held is not None and held.written is not None:  # the state object committed last: does it go on from it?
            return held.kept if _continues(state, held.written) else None
        found = self._checked(tx, run_id)
        if not found or type(found[0][5]) is not int:
            return None
        try:
            stored = RunState.from_json(found[0][4])
        except (ValueError, RecursionError):
            return None
        for items, before in zip(_lists(state), _lists(stored), strict=True):
            if items[: len(before)] != before:
                return None
        kept = tx.rows(
            "SELECT messages, observations, grown FROM agent_fsm_checkpoints WHERE run_id = ?"
            " ORDER BY point DESC LIMIT 1",
            (run_id,),
        )
        if not kept:
            return _NOTHING
        counts, others = kept[0][:2], grown_counts(kept[0][2])
        if type(counts[0]) is not int or type(counts[1]) is not int or others is None:
            return None
        return (counts[0], counts[1], *others)

    def save(self, run_id: str, state: RunState, intent: Intent | None = None) -> None:
        """
        Commit ``state`` (and ``intent``, the effect about to run) while this store owns the run at the version it read.

        Raises:
            RunTakenOver: another store claimed the run; nothing was written.
            AlreadyDecided: ``state`` is not the run's latest (the store holds a later one); nothing was written.
            RunNotFound: the run was never begun.
            DamagedRun: ``state`` belongs to another run.
        """
        belongs(run_id, state)
        status = status_of(state)[0]
        held = self._held.get(run_id)
        bound = held is not None and (held.state is None or held.state() is state)
        # The fields' texts are the run's, whichever state object holds them: kept even for another object.
        writer = held.writer if held is not None else StateWriter()
        try:
            version, written, kept = self._commit(run_id, state, intent, held if bound else None, writer)
        except StoreError as exc:
            self._held.pop(run_id, None)  # refused: whatever this store held of the run is not to be trusted
            exc.state = exc.state or state  # nothing is lost: the caller holds what was not committed
            raise
        if status == "running" and bound and held is not None and held.state is not None:  # the same object goes on
            held.version, held.written, held.kept = version + 1, written, kept or _NOTHING
        elif status == "running":
            self._held[run_id] = _Held(version + 1, weakref.ref(state), written, kept or _NOTHING, writer)
        else:  # at rest: whatever continues it next is a new state object, checked against the stored one
            self._held.pop(run_id, None)

    def fail(self, run_id: str, error: str) -> bool:
        """
        Record run ``run_id``, running under this store, as ``failed``: a bug (its gate's, a handler's) stopped it.

        The engine calls this as the bug's error leaves the run. The row keeps
        its last commit (a fork can start from any checkpoint) and an effect
        left in flight stays unsettled; ``reason`` is ``error``. A failed run
        is not in flight, so :func:`agent_fsm.store.recover` leaves it alone.
        Returns whether it was recorded: not when another store took the run
        over or it was committed since this store's last commit.
        """
        held = self._held.pop(run_id, None)
        self._open.pop(run_id, None)
        if not holdable(run_id):
            return False
        exact = " AND version = ?" if held is not None else ""
        with self._transaction() as tx:
            return bool(
                tx.run(
                    "UPDATE agent_fsm_runs SET status = 'failed', reason = ?, updated_at = ?, version = version + 1"
                    " WHERE run_id = ? AND owner = ? AND status = 'running'" + exact,
                    (text_column(error), time.time(), run_id, self.owner, *(() if held is None else (held.version,))),
                )
            )

    def _commit(
        self, run_id: str, state: RunState, intent: Intent | None, held: _Held | None, writer: StateWriter
    ) -> tuple[int, _Written | None, tuple[int, ...] | None]:
        """The compare-and-set of :meth:`save`: the version it wrote over, the marks of its lists, their lengths."""
        status, stop = status_of(state)
        paused = status == "paused" and bool(state.pending)
        now = time.time()
        previous = self._open.get(run_id)
        # An effect-free commit writes the row, the new messages and the checkpoint kept; one with an intent
        # writes the row, the new messages and the intent. No message is written twice.
        with self._transaction() as tx:
            # A state object this store committed (or the first after a decision or a claim) continues
            # at the version held; any other must be shown to continue the stored state itself.
            version = (
                held.version if held is not None else continuable(run_id, self._checked(tx, run_id), self.owner, state)
            )
            since = self._since(tx, run_id, state, held)
            text, lengths, columns, at_rest = _what(state, since, writer)
            # A checkpoint's row keeps what was added since the one before; the run's row, while an effect
            # is in flight, what was added since its latest checkpoint (see .transcript).
            rest = columns if intent is not None else at_rest
            # A run held here is stored running at the version held: while it stays running, its status is
            # not written again (a status written is an index entry rewritten, a page more per commit).
            still = held is not None and status == "running"
            changed = tx.run(
                ("UPDATE agent_fsm_runs SET " if still else "UPDATE agent_fsm_runs SET status = ?, ")
                + "stop = ?, machine_state = ?, state = ?, messages = ?, observations = ?, new_messages = ?,"
                " new_observations = ?, grown = ?, pause_id = ?, reason = ?, blocked = ?, tool = ?, agent = ?,"
                " intent = ?,"
                " updated_at = ?,"
                " version = version + 1"
                " WHERE run_id = ? AND owner = ? AND version = ?",
                (
                    *(() if still else (status,)),
                    stop,
                    state.machine_state,
                    text if intent is not None else _row_text(text, columns),
                    *rest,
                    state.pause_id if paused else None,
                    *pause_columns(state),  # the reason and the innermost call a person decides
                    *inbox_columns(state),  # what the inbox filters a paused run by
                    json.dumps(intent_data(intent)) if intent is not None else None,
                    now,
                    run_id,
                    self.owner,
                    version,
                ),
            )
            if not changed:
                raise refusal(run_id, tx.rows(CHECKED, (run_id,)), self.owner, state)
            if previous is not None:
                outcome = outcome_of(state, previous)
                tx.run(
                    "UPDATE agent_fsm_effects SET observed_at = ?, outcome = ?"
                    " WHERE run_id = ? AND idempotency_key = ? AND observed_at IS NULL",
                    (now, outcome, run_id, previous.idempotency_key),
                )
            if intent is None:  # no effect in flight: a point the run (or a fork of it) can go on from
                tx.run(KEEP, (run_id, state.machine_state, stop, text, *columns, now, run_id))
            else:
                tx.run(
                    "INSERT INTO agent_fsm_effects (run_id, idempotency_key, tool, call_id, fingerprint, intent_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        intent.idempotency_key,
                        *map(text_column, (intent.tool, addressed(intent))),
                        intent.fingerprint,
                        now,
                    ),
                )
        self._open.pop(run_id, None)
        if intent is not None:
            self._open[run_id] = intent
        kept = lengths if intent is None else since  # a checkpoint written, whole or not: later commits add to it
        return version, None if kept is None else _written(state), kept

    def _checked(self, tx: Transaction, run_id: str) -> list[tuple[Any, ...]]:
        """
        The :data:`CHECKED` row of ``run_id`` with its transcript rows put back, the run's row locked until the commit.

        Locked: a commit by another store, landing between the read of the
        row and of its checkpoints, would mix two moments of the run (read as
        damaged); it waits, and this commit is refused or goes on as the row says.
        """
        rows = tx.rows(CHECKED + self._lock_row, (run_id,))
        return [(*row[:4], self._whole(tx, run_id, row[4], row[5], row[7:10]), *row[5:]) for row in rows]

    # --- reading ---------------------------------------------------------------------

    def load(self, run_id: str) -> StoredRun:
        """
        The run stored under ``run_id``, with its state and any intent left open.

        Raises:
            RunNotFound: nothing is stored under ``run_id``.
            DamagedRun: the stored run cannot be read, or its state is another run's (written by something else).
        """
        if not holdable(run_id):  # never stored: begin refuses it
            raise RunNotFound(f"no run is stored under {run_id!r}")
        with self._transaction(write=False) as tx:
            rows = self._stored(tx, run_id)
        if not rows:
            raise RunNotFound(f"no run is stored under {run_id!r}")
        return stored_of(rows[0])

    def runs(self, status: str | None = None) -> list[RunSummary]:
        """Every stored run (or those with ``status``), most recently changed first."""
        if status is not None and not holdable(status):
            return []
        where, params = ("WHERE status = ?", (status,)) if status is not None else ("", ())
        with self._transaction(write=False) as tx:
            rows = tx.rows(f"SELECT {SUMMARY} FROM agent_fsm_runs {where} ORDER BY updated_at DESC", params)
        return [listed(row) for row in rows]

    def paused(
        self,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        agent: str | None = None,
        tool: str | None = None,
        older_than: float | None = None,
        reason: str | None = None,
        claimed: str | bool | None = None,
        count: bool = False,
    ) -> PausedPage:
        """
        The approval inbox: the runs waiting for a person, newest pause first, a page at a time.

        Without arguments, every paused run. ``limit`` makes it a page of at
        most that many; pass its ``next`` as ``cursor`` for the page after.
        The filters (see :class:`~agent_fsm.store.PausedFilter`) keep the runs
        of one ``agent``, blocked on one ``tool``, paused ``older_than``
        seconds ago or more, whose gate's ``reason`` holds a text, or
        ``claimed`` by a reviewer; ``count`` also counts every run they let through.

        Raises:
            BadCursor: ``cursor`` is damaged or was made under other filters.
            ValueError: ``limit`` is not 1 to 500, or a filter is malformed.
        """
        chosen = PausedFilter(agent, tool, older_than, reason, claimed)
        with self._transaction(write=False) as tx:
            return page_in(tx, chosen, limit=limit, cursor=cursor, count=count)

    def claim(
        self, run_id: str, reviewer: str, *, pause_id: str | None = None, seconds: float = CLAIM_SECONDS
    ) -> Claim:
        """
        Claim the paused run for ``reviewer`` for ``seconds`` (renewing their own claim): others see it claimed.

        Raises:
            ClaimTaken: another reviewer's claim on this pause is live.
            AlreadyDecided: the run is not paused (or not at ``pause_id``).
            RunNotFound: no such run.
        """
        with self._transaction() as tx:
            return claim_in(tx, run_id, reviewer, pause_id=pause_id, seconds=seconds)

    def release(self, run_id: str, reviewer: str) -> bool:
        """Drop ``reviewer``'s claim on the run (whether there was one)."""
        with self._transaction() as tx:
            return release_in(tx, run_id, reviewer)

    def claim_of(self, run_id: str) -> Claim | None:
        """The live claim on the run's open pause, if any."""
        with self._transaction(write=False) as tx:
            return claim_of(tx, run_id)

    def history(self, run_id: str) -> list[Decision]:
        """The decisions taken on the run's pauses, oldest first."""
        if not holdable(run_id):
            return []
        with self._transaction(write=False) as tx:
            rows = tx.rows(f"{DECISIONS} ORDER BY at", (run_id,))
        return [decision_of(row) for row in rows]

    def effects(self, run_id: str) -> list[Effect]:
        """Every effectful call's intent and observation, oldest first."""
        if not holdable(run_id):
            return []
        with self._transaction(write=False) as tx:
            rows = tx.rows(EFFECTS, (run_id,))
        return [effect_of(row) for row in rows]

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The points the run can be forked from, oldest (``0``, as begun) first."""
        if not holdable(run_id):
            return []
        with self._transaction(write=False) as tx:
            rows = tx.rows(CHECKPOINTS, (run_id,))
        return [checkpoint_of(row) for row in rows]

    def checkpoint(self, run_id: str, point: int) -> RunState:
        """
        The state the run had at checkpoint ``point`` (data to look at; a fork is how it goes on).

        Raises:
            RunNotFound: no run ``run_id``, or it has no checkpoint ``point``.
            DamagedRun: the checkpoint cannot be read, or is another run's.
        """
        with self._transaction(write=False) as tx:
            return self._checkpoint(tx, run_id, point)

    def _checkpoint(self, tx: Transaction, run_id: str, point: int) -> RunState:
        if type(point) is not int or not 0 <= point < 2**63:  # a database's integer is 64-bit
            raise ValueError(f"a checkpoint is numbered 0, 1, 2 ... up to 2**63-1 (got {point!r})")
        found = (
            tx.rows(
                "SELECT state, messages FROM agent_fsm_checkpoints WHERE run_id = ? AND point = ?",
                (run_id, point),
            )
            if holdable(run_id)
            else []
        )
        if found:
            try:
                text = self._whole(tx, run_id, found[0][0], found[0][1], point=point)
            except DamagedRun as exc:
                raise DamagedRun(f"checkpoint {point} of run {run_id!r} cannot be read: {exc}") from exc
            return checkpoint_state(run_id, point, text)
        kept = tx.rows(CHECKPOINTS, (run_id,)) if holdable(run_id) else []
        if kept:
            raise RunNotFound(f"run {run_id!r} has no checkpoint {point} (it has {len(kept)}: 0 to {len(kept) - 1})")
        if holdable(run_id) and tx.rows("SELECT run_id FROM agent_fsm_runs WHERE run_id = ?", (run_id,)):
            raise RunNotFound(f"run {run_id!r} has no checkpoints kept (it was stored before the store kept them)")
        raise RunNotFound(f"no run is stored under {run_id!r}")

    def forked_from(self, run_id: str) -> Fork | None:
        """Where the run was forked from (``None``: it was not a fork)."""
        if not holdable(run_id):
            return None
        with self._transaction(write=False) as tx:
            rows = tx.rows(f"{FORKS} WHERE run_id = ?", (run_id,))
        return fork_of(rows[0]) if rows else None

    def forks(self, run_id: str) -> list[Fork]:
        """The runs forked from this one, oldest first."""
        if not holdable(run_id):
            return []
        with self._transaction(write=False) as tx:
            rows = tx.rows(f"{FORKS} WHERE parent = ? ORDER BY forked_at", (run_id,))
        return [fork_of(row) for row in rows]

    def fork(self, run_id: str, *, at: int, new_run_id: str) -> StoredRun:
        """
        Begin run ``new_run_id``, owned here, from checkpoint ``at`` of ``run_id`` (:func:`agent_fsm.store.fork`).

        One transaction: the new run's row (paused, with its own pause id, or
        running), its checkpoint 0 and the record of where it came from.

        Raises:
            RunNotFound: no run ``run_id``, or it has no checkpoint ``at``.
            RunExists: ``new_run_id`` is taken.
            ValueError: ``at`` is no checkpoint number, the checkpoint is the ending, or ``new_run_id`` cannot be held.
            DamagedRun: the checkpoint cannot be read, or is another run's.
        """
        if not isinstance(new_run_id, str) or not new_run_id or not holdable(new_run_id):
            raise ValueError(
                "a forked run needs an id a database can hold (a non-empty str, no NUL, no lone surrogate):"
                f" {new_run_id!r}"
            )
        now = time.time()
        try:
            with self._transaction() as tx:
                state = forked_state(self._checkpoint(tx, run_id, at), new_run_id)
                status, stop = status_of(state)
                if status == "ended":
                    raise ValueError(
                        f"checkpoint {at} of run {run_id!r} is its ending ({stop}): nothing goes on from it;"
                        " fork an earlier checkpoint"
                    )
                paused = status == "paused"
                text, _, columns, at_rest = _what(state, _NOTHING, StateWriter())
                tx.run(
                    "INSERT INTO agent_fsm_runs (run_id, status, stop, machine_state, state, messages, observations,"
                    " new_messages, new_observations, grown, pause_id, reason, blocked, tool, agent, owner,"
                    " created_at, updated_at, version)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                    (
                        new_run_id,
                        status,
                        stop,
                        state.machine_state,
                        text,
                        *at_rest,
                        state.pause_id if paused else None,
                        *pause_columns(state),
                        *inbox_columns(state),
                        self.owner,
                        now,
                        now,
                    ),
                )
                tx.run(KEEP, (new_run_id, state.machine_state, stop, text, *columns, now, new_run_id))
                tx.run(
                    "INSERT INTO agent_fsm_forks (run_id, parent, point, forked_at) VALUES (?, ?, ?, ?)",
                    (new_run_id, run_id, at, now),
                )
                # Read back before the commit: a fork that cannot be read is never left behind as a damaged row.
                stored = stored_of(self._stored(tx, new_run_id)[0])
        except StoreError as exc:
            if self._is_duplicate(exc):
                raise RunExists(f"a run is already stored under {new_run_id!r}; give the fork its own id") from exc
            raise
        return stored

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
            RunNotFound: no run is stored under ``run_id``.
        """
        if not holdable(run_id):
            raise RunNotFound(f"no run is stored under {run_id!r}")
        if not holdable(pause_id):
            raise AlreadyDecided(f"run {run_id!r} has no open pause {pause_id!r}; list the inbox again")
        reviewer, reason = text_column(reviewer) or "", text_column(reason)
        now = time.time()
        try:
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
                        (
                            run_id,
                            pause_id,
                            decision,
                            reviewer,
                            reason,
                            json.dumps(arguments) if arguments else None,
                            now,
                        ),
                    )
                    rows = self._stored(tx, run_id)
                    # Checked before the decision commits: a row whose parts disagree decides nothing.
                    decided = stored_of(rows[0])
                    agrees(decided, pause_id, rows[0][6])
        except StoreError as exc:
            if not self._is_duplicate(exc):
                raise
            raise self._lost(run_id, pause_id) from exc  # a decided pause put back in its row (a restored backup)
        if not won:
            raise self._lost(run_id, pause_id)
        self._held[run_id] = _Held(decided.summary.version, None)
        return decided

    def _lost(self, run_id: str, pause_id: str) -> StoreError | AlreadyDecided:
        with self._transaction(write=False) as tx:
            earlier = tx.rows(f"{DECISIONS} AND pause_id = ?", (run_id, pause_id))
            current = tx.rows("SELECT status FROM agent_fsm_runs WHERE run_id = ?", (run_id,))
        return lost(run_id, pause_id, earlier, current)

    def claim_stale(self, older_than: float, *, limit: int | None = None) -> list[StoredRun]:
        """
        Take over the runs still ``running`` whose last commit is at least ``older_than`` seconds old
        (the oldest first, at most ``limit`` of them).

        They are claimed in one transaction under row locks: on PostgreSQL
        ``FOR UPDATE SKIP LOCKED``, so of several processes sweeping at once
        each claims other runs and none waits for a row another holds; on
        SQLite the single writer does the same. The process that held a run,
        if alive, gets :class:`RunTakenOver` at its next checkpoint.
        """
        cutoff = time.time() - older_than
        bounded = "" if limit is None else f" LIMIT {max(int(limit), 0)}"
        claimed = []
        with self._transaction() as tx:
            seen = tx.rows(
                "SELECT run_id FROM agent_fsm_runs WHERE status = 'running' AND updated_at <= ?"
                " ORDER BY updated_at" + bounded + self._skip_locked,
                (cutoff,),
            )
            for (run_id,) in seen:
                tx.run(
                    "UPDATE agent_fsm_runs SET owner = ?, updated_at = ?, version = version + 1 WHERE run_id = ?",
                    (self.owner, time.time(), run_id),
                )
                claimed.append(stored_of(self._stored(tx, run_id)[0]))
        for stored in claimed:
            self._held[stored.run_id] = _Held(stored.summary.version, None)
            if stored.intent is not None:
                self._open[stored.run_id] = stored.intent
        return claimed
