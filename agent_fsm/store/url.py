"""Open a store from a URL: ``sqlite:///relative.db``, ``sqlite:////absolute/path.db``, ``postgresql://...``."""

from __future__ import annotations

from agent_fsm.store.postgres import PostgresStore
from agent_fsm.store.sql import SqlStore
from agent_fsm.store.sqlite import SqliteStore

__all__ = ["open_store"]


def open_store(url: str, *, create: bool = True) -> SqlStore:
    """
    The store a URL names (its schema migrated on opening).

    ``create=False`` refuses a SQLite file that does not exist rather than
    making an empty one (what ``agent-fsm runs`` and the inbox open).

    Raises:
        ValueError: the URL is neither ``sqlite:///PATH`` nor ``postgresql://...``.
        DatabaseError: the database cannot be opened (with ``create=False``: no SQLite file at ``PATH``).
    """
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
        if not path:
            raise ValueError("sqlite:/// needs a file path, e.g. sqlite:///runs.db")
        return SqliteStore(path, create=create)
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresStore(url)
    raise ValueError(f"a store URL is sqlite:///PATH or postgresql://USER@HOST:PORT/DB (got {url!r})")
