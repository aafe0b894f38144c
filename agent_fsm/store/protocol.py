"""The :class:`RunStore` protocol (what the inbox, recovery and the CLI need), and a SQL :class:`Transaction`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agent_fsm.engine import Intent, RunState
from agent_fsm.store.records import Checkpoint, Claim, Decision, Effect, Fork, RunSummary, StoredRun

if TYPE_CHECKING:
    from agent_fsm.store.listing import PausedPage

__all__ = ["RunStore", "Transaction"]


@runtime_checkable
class RunStore(Protocol):
    """
    Durable storage of runs: the kernel's checkpointer plus the reads and takeovers around it.

    :class:`~agent_fsm.store.SqliteStore` and :class:`~agent_fsm.store.PostgresStore`
    implement it; both are checked by the same tests.
    """

    owner: str

    def begin(self, run_id: str, state: RunState) -> None:
        """Record a new run owned by this store (``RunExists`` if the id is taken)."""

    def save(self, run_id: str, state: RunState, intent: Intent | None = None) -> None:
        """Commit ``state`` (and an intent) while this store owns the run (``RunTakenOver`` if not)."""

    def fail(self, run_id: str, error: str) -> bool:
        """Record the run, running here, as ``failed`` with ``error``: a bug stopped it (whether it was recorded)."""

    def load(self, run_id: str) -> StoredRun:
        """The run with its state (``RunNotFound`` if none)."""

    def runs(self, status: str | None = None) -> list[RunSummary]:
        """Every run, or those with ``status`` (``running``, ``paused``, ``ended``, ``failed``)."""

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
        """The approval inbox: every paused run, or a page of them after ``cursor``, filtered (see ``SqlStore``)."""

    def claim(self, run_id: str, reviewer: str, *, pause_id: str | None = None, seconds: float = ...) -> Claim:
        """Claim a paused run for ``reviewer`` (``ClaimTaken`` if another's claim is live)."""

    def release(self, run_id: str, reviewer: str) -> bool:
        """Drop ``reviewer``'s claim on the run."""

    def claim_of(self, run_id: str) -> Claim | None:
        """The live claim on the run's open pause."""

    def history(self, run_id: str) -> list[Decision]:
        """The decisions taken on the run's pauses."""

    def effects(self, run_id: str) -> list[Effect]:
        """The run's effectful calls: intent and observation of each."""

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The points the run can be forked from, oldest (0, as begun) first."""

    def checkpoint(self, run_id: str, point: int) -> RunState:
        """The state at checkpoint ``point`` (``RunNotFound`` if none)."""

    def fork(self, run_id: str, *, at: int, new_run_id: str) -> StoredRun:
        """Begin run ``new_run_id`` from checkpoint ``at`` of ``run_id`` (see :func:`agent_fsm.store.fork`)."""

    def forked_from(self, run_id: str) -> Fork | None:
        """Where the run was forked from, if it is a fork."""

    def forks(self, run_id: str) -> list[Fork]:
        """The runs forked from this one."""

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
        """Close the open pause atomically and take the run over (``AlreadyDecided`` if it is not open)."""

    def claim_stale(self, older_than: float, *, limit: int | None = None) -> list[StoredRun]:
        """Take over the runs left ``running`` with no commit for ``older_than`` seconds (at most ``limit``)."""

    def close(self) -> None:
        """Release the store's connection."""


class Transaction(Protocol):
    """One open transaction: run a statement (``?`` placeholders), read its rows or how many it changed."""

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute a write; the number of rows it changed."""

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Execute a read; its rows."""
