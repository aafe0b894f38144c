"""
What a store raises: :class:`~agent_fsm.engine.AlreadyDecided` (the engine's, a
``DecisionRefused`` and a ``ValueError``) when the pause a decision names was decided
(or is gone) before it, or a state committed is an older copy of the stored one; all
else under :class:`StoreError`::

    * StoreError (also RuntimeError)
      + RunNotFound (also LookupError)   -- no run is stored under that id
      + RunExists (also ValueError)      -- a new run was given an id already used
      + RunTakenOver                     -- another process claimed the run; this one must stop writing it
      + SchemaError                      -- the database's schema is not one this version can use
      + DamagedRun (also ValueError)     -- a stored run cannot be read, or its parts disagree (another
                                            run's state in its row, a blocked call its state does not hold)
      + DatabaseError (also OSError)     -- the database cannot be opened, read or written (not a database,
                                            damaged, read-only, a directory, the disk full)
      + BadCursor (also ValueError)      -- a listing's cursor is damaged, forged or made for another filter
      + ClaimTaken                       -- another reviewer holds a live claim on the paused run

A driver's own exceptions (``sqlite3.*``, ``psycopg.*``) never escape a store:
each is mapped to one of these, chained (``raise ... from``) to the original.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_fsm.engine import AgentFSMError, AlreadyDecided

if TYPE_CHECKING:
    from agent_fsm.engine import RunState

__all__ = [
    "AlreadyDecided",
    "BadCursor",
    "ClaimTaken",
    "DamagedRun",
    "DatabaseError",
    "RunExists",
    "RunNotFound",
    "RunTakenOver",
    "SchemaError",
    "StoreError",
]


class StoreError(AgentFSMError, RuntimeError):
    """
    A run store could not do what was asked.

    ``state`` is the run's state when a commit of it failed (nothing of it
    is lost: it is here, and the store still holds the last commit), else ``None``.
    """

    def __init__(self, message: str, *, state: RunState | None = None) -> None:
        super().__init__(message)
        self.state = state


class RunNotFound(StoreError, LookupError):
    """No run is stored under the id given."""


class RunExists(StoreError, ValueError):
    """A new run was begun under an id the store already holds."""


class RunTakenOver(StoreError):
    """
    Another process claimed this run (it looked abandoned); this process may not commit it any more.

    Raised by a checkpoint, so a handler about to run under a stale claim never starts.
    """


class SchemaError(StoreError):
    """The database holds a schema this version of agent_fsm does not know (written by a newer one)."""


class DamagedRun(StoreError, ValueError):
    """
    A stored run cannot be read, or its parts disagree: something other than this store wrote its row.

    Nothing is decided or run on such a row: what a reviewer is shown (the
    row's blocked call) and what an approval would execute (its state) must
    be one and the same.
    """


class DatabaseError(StoreError, OSError):
    """The database cannot be opened, read or written: not a database, damaged, read-only, a directory, full."""


class BadCursor(StoreError, ValueError):
    """A cursor given to a listing is not one it made: damaged, forged, or made under another filter."""


class ClaimTaken(StoreError):
    """
    Another reviewer holds a live claim on the paused run; ``reviewer`` is who, ``expires_at`` until when.

    Nothing was claimed; the run can still be decided by anyone (a claim is advisory).
    """

    def __init__(self, message: str, *, reviewer: str, expires_at: float) -> None:
        super().__init__(message)
        self.reviewer = reviewer
        self.expires_at = expires_at
