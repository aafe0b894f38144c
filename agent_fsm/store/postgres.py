"""
:class:`PostgresStore`: the run store on PostgreSQL, for many processes on many machines.

Needs the ``postgres`` extra (``pip install 'agent_fsm[postgres]'``, which
brings psycopg 3); it is imported only when a store is opened. Decisions and
claims are the same compare-and-set updates as on SQLite: PostgreSQL's row
lock makes a second concurrent update re-check its condition against the
first one's result, so exactly one wins.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from agent_fsm.store.errors import DatabaseError, StoreError
from agent_fsm.store.sql import SqlStore, Transaction

__all__ = ["PostgresStore"]

# Any constant shared by every agent_fsm process: serialises schema migrations.
_MIGRATION_LOCK = 0x61_66_73_6D


class _PostgresTransaction:
    def __init__(self, connection: Any) -> None:
        self._connection = connection

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        rowcount: int = self._connection.execute(sql.replace("?", "%s"), tuple(params)).rowcount
        return rowcount

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._connection.execute(sql.replace("?", "%s"), tuple(params)).fetchall())


class PostgresStore(SqlStore):
    """
    Runs stored in the PostgreSQL database at ``dsn`` (``postgresql://user@host:port/db``).

    The schema is created and migrated on opening. One connection per store,
    in autocommit mode with an explicit transaction per write.

    Raises:
        StoreError: psycopg is not installed, or the server cannot be reached.
        DatabaseError: (later, from any method) the server failed a statement or the connection broke;
            every ``psycopg`` error is one.
    """

    name = "postgres"
    _skip_locked = " FOR UPDATE SKIP LOCKED"
    _lock_row = " FOR UPDATE"

    def __init__(self, dsn: str) -> None:
        super().__init__()
        try:
            import psycopg
        except ImportError as exc:
            raise StoreError("PostgresStore needs psycopg 3: pip install 'agent_fsm[postgres]'") from exc
        self._psycopg = psycopg
        self.dsn = dsn
        try:
            self._connection = psycopg.connect(dsn, autocommit=True)
        except psycopg.OperationalError as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {_redacted(dsn)}: {exc}") from exc
        self._lock = threading.Lock()
        self.migrate()

    def __repr__(self) -> str:
        return f"PostgresStore({_redacted(self.dsn)!r})"

    @contextmanager
    def _transaction(self, *, write: bool = True, single: bool = False) -> Iterator[Transaction]:
        with self._lock:
            try:
                if single:  # the connection is in autocommit mode: one statement is its own transaction
                    yield _PostgresTransaction(self._connection)
                    return
                with self._connection.transaction():
                    if not write:  # its statements read one snapshot, as SQLite's do: a run's row with its pieces
                        self._connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    yield _PostgresTransaction(self._connection)
            except self._psycopg.Error as exc:
                raise DatabaseError(f"PostgreSQL at {_redacted(self.dsn)} failed: {exc}") from exc

    def _lock_for_migration(self, tx: Transaction) -> None:
        tx.rows("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))

    def _is_duplicate(self, exc: BaseException) -> bool:
        return isinstance(exc.__cause__, self._psycopg.errors.UniqueViolation)

    def close(self) -> None:
        """Close the database connection."""
        self._connection.close()


def _redacted(dsn: str) -> str:
    """The DSN without its password, for messages."""
    if "://" not in dsn or "@" not in dsn:
        return dsn
    scheme, rest = dsn.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in credentials else dsn
