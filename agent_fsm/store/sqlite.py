"""
:class:`SqliteStore`: the embedded run store, one file on local disk, no set-up.

WAL mode lets readers (the inbox, ``agent-fsm runs list``) read while a run
commits; every write takes the database's write lock up front
(``BEGIN IMMEDIATE``), so concurrent processes queue instead of failing
half-way through a transaction.

The WAL is copied back into the database (a checkpoint, with two disk
flushes) every :data:`WAL_PAGES` pages rather than SQLite's 1,000: the
flushes, not the copying, are most of a checkpoint's cost, and a short
run's four commits write five or six pages each.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent_fsm.store.errors import DatabaseError
from agent_fsm.store.sql import SqlStore, Transaction

__all__ = ["WAL_PAGES", "SqliteStore"]

WAL_PAGES = 10_000
"""Pages (4 KiB each) the WAL grows to before it is checkpointed: about 40 MB of disk, a sixth of a short run's cost."""

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+://")


class _SqliteTransaction:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._connection.execute(sql, tuple(params)).rowcount

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._connection.execute(sql, tuple(params)).fetchall())


class SqliteStore(SqlStore):
    """
    Runs stored in the SQLite database at ``path`` (created, and its schema migrated, on opening).

    ``synchronous`` is SQLite's setting: ``"NORMAL"`` (the default) makes
    every commit survive the process being killed; ``"FULL"`` also survives
    the machine losing power, at the cost of a disk flush per commit.
    ``timeout`` is how long a write waits for another process's lock.
    ``create=False`` opens only a file that exists: what reads runs (``agent-fsm
    runs``, the inbox) never leaves an empty database behind a mistyped path.

    Raises:
        ValueError: ``path`` is a store URL (``sqlite:///...``): that is :func:`agent_fsm.store.open_store`'s.
        DatabaseError: the file is not a database, is damaged, cannot be
            written, or ``path`` is a directory (every ``sqlite3`` error is one);
            with ``create=False``, there is no file at ``path``.
    """

    name = "sqlite"

    def __init__(
        self, path: str | Path, *, synchronous: str = "NORMAL", timeout: float = 30.0, create: bool = True
    ) -> None:
        super().__init__()
        if synchronous.upper() not in ("NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be NORMAL, FULL or EXTRA (got {synchronous!r})")
        if isinstance(path, str) and _URL.match(path):  # else 'sqlite:///runs.db' is a folder 'sqlite:' and a file
            raise ValueError(
                f"SqliteStore takes a file path, not a URL (got {path!r}): give SqliteStore('runs.db'),"
                " or open a URL with open_store('sqlite:///runs.db')"
            )
        self.path = Path(path)
        self._lock = threading.Lock()  # one connection, used by one thread at a time
        with self._driver_errors():
            if not create and not self.path.is_file():
                raise DatabaseError(
                    f"no SQLite database at {str(self.path)!r} (check the path; a reader never creates one)"
                )
            # mode=rw: opened read-write, never created, should the file vanish after the check above.
            where = f"{self.path.resolve().as_uri()}?mode=rw" if not create else self.path
            # isolation_level=None: no implicit transactions; every write is an explicit BEGIN IMMEDIATE ... COMMIT.
            self._connection = sqlite3.connect(
                where, timeout=timeout, isolation_level=None, check_same_thread=False, uri=not create
            )
            self._use_wal(timeout)
            self._connection.execute(f"PRAGMA synchronous={synchronous.upper()}")
            # A setting of this connection, not of the file: whichever connection commits past it checkpoints.
            self._connection.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
            self._connection.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        self.migrate()

    @contextmanager
    def _driver_errors(self) -> Iterator[None]:
        """Every ``sqlite3`` error as a :class:`DatabaseError` naming the file, chained to the original."""
        try:
            yield
        except sqlite3.Error as exc:
            raise DatabaseError(f"the SQLite database {str(self.path)!r} failed: {exc}") from exc

    def _use_wal(self, timeout: float) -> None:
        # WAL is a property of the file, set once; switching to it needs a moment alone with the
        # database, which SQLite refuses at once (no busy wait) while another process opens it too.
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    self._connection.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    @contextmanager
    def _transaction(self, *, write: bool = True, single: bool = False) -> Iterator[Transaction]:
        with self._lock, self._driver_errors():
            if single:  # one write statement in autocommit mode: its own transaction, waiting for the lock
                yield _SqliteTransaction(self._connection)
                return
            # A write takes the lock up front: a deferred one could read a snapshot another writer then outdates.
            self._connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield _SqliteTransaction(self._connection)
            except BaseException:
                if self._connection.in_transaction:  # SQLite may have rolled back already (a full disk)
                    self._connection.execute("ROLLBACK")
                raise
            self._connection.execute("COMMIT")

    def _is_duplicate(self, exc: BaseException) -> bool:
        return isinstance(exc.__cause__, sqlite3.IntegrityError)

    def close(self) -> None:
        """Close the database connection."""
        self._connection.close()
