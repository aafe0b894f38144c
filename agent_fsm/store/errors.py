"""
What a store raises, all under :class:`StoreError`::

    * StoreError (also RuntimeError)
      + RunNotFound (also LookupError)   -- no run is stored under that id
      + RunExists (also ValueError)      -- a new run was given an id already used
      + AlreadyDecided (also ValueError) -- the pause was decided (or is gone) before this decision
      + RunTakenOver                     -- another process claimed the run; this one must stop writing it
      + SchemaError                      -- the database's schema is not one this version can use
"""

from __future__ import annotations

from agent_fsm.engine import AgentFSMError

__all__ = ["AlreadyDecided", "RunExists", "RunNotFound", "RunTakenOver", "SchemaError", "StoreError"]


class StoreError(AgentFSMError, RuntimeError):
    """A run store could not do what was asked."""


class RunNotFound(StoreError, LookupError):
    """No run is stored under the id given."""


class RunExists(StoreError, ValueError):
    """A new run was begun under an id the store already holds."""


class AlreadyDecided(StoreError, ValueError):
    """
    The pause a decision names is not open any more: another decision won, or the run moved on.

    Of two concurrent decisions on one pause, exactly one succeeds; the other raises this.
    """


class RunTakenOver(StoreError):
    """
    Another process claimed this run (it looked abandoned); this process may not commit it any more.

    Raised by a checkpoint, so a handler about to run under a stale claim never starts.
    """


class SchemaError(StoreError):
    """The database holds a schema this version of agent_fsm does not know (written by a newer one)."""
