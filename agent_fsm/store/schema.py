"""
The store's tables, as numbered migrations the store applies to itself.

A database records the last migration applied; opening a store applies
the ones after it, in one locked transaction, so an old database is
brought up to date and two processes opening it at once do not race.
Never edit a released migration: append a new one.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "VERSION_TABLE"]

VERSION_TABLE = "agent_fsm_schema"

MIGRATIONS: list[tuple[str, ...]] = [
    # 1: runs and the decisions taken on their pauses.
    (
        """CREATE TABLE agent_fsm_runs (
            run_id TEXT PRIMARY KEY,
            status TEXT NOT NULL,
            stop TEXT,
            machine_state TEXT NOT NULL,
            state TEXT NOT NULL,
            pause_id TEXT,
            reason TEXT,
            blocked TEXT,
            intent TEXT,
            owner TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            version INTEGER NOT NULL
        )""",
        """CREATE TABLE agent_fsm_decisions (
            run_id TEXT NOT NULL,
            pause_id TEXT NOT NULL,
            decision TEXT NOT NULL,
            reviewer TEXT NOT NULL,
            reason TEXT,
            arguments TEXT,
            at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (run_id, pause_id)
        )""",
    ),
    # 2: the record of every effectful call (intent, then observation), and the indexes recovery reads.
    (
        """CREATE TABLE agent_fsm_effects (
            run_id TEXT NOT NULL,
            idempotency_key TEXT NOT NULL,
            tool TEXT NOT NULL,
            call_id TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            intent_at DOUBLE PRECISION NOT NULL,
            observed_at DOUBLE PRECISION,
            outcome TEXT
        )""",
        "CREATE INDEX agent_fsm_effects_by_run ON agent_fsm_effects (run_id, intent_at)",
        "CREATE INDEX agent_fsm_runs_by_status ON agent_fsm_runs (status)",
    ),
]
"""Migration ``n`` (1-based) is ``MIGRATIONS[n - 1]``: statements run in order, in one transaction."""
