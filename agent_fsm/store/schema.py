"""
The store's tables, as numbered migrations the store applies to itself.

A database records the last migration applied; opening a store applies
the ones after it, in one locked transaction, so an old database is
brought up to date and two processes opening it at once do not race.
Never edit a released migration: append a new one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from agent_fsm.engine import OUTCOME_UNKNOWN
from agent_fsm.store.errors import SchemaError
from agent_fsm.store.protocol import Transaction
from agent_fsm.store.transcript import split_saved

__all__ = ["MIGRATIONS", "VERSION_TABLE", "Step", "migrate", "migrated"]

VERSION_TABLE = "agent_fsm_schema"

Step = str | Callable[[Transaction], None]
"""A migration's step: a statement, or a function converting rows in the migration's transaction."""


def _written_once(tx: Transaction) -> None:
    """
    Keep each run's lists once: every state without them, each checkpoint with the items added since the one before.

    A run whose checkpoints are not each an extension of the one before (or
    holding a state that cannot be read) is left whole, as it was.
    """
    for run_id, text in tx.rows("SELECT run_id, state FROM agent_fsm_runs WHERE messages IS NULL"):
        final = split_saved(text)
        kept = tx.rows("SELECT point, state FROM agent_fsm_checkpoints WHERE run_id = ? ORDER BY point", (run_id,))
        states = [split_saved(saved) for _, saved in kept]
        if final is None or any(state is None for state in states):
            continue
        chain = [state for state in states if state is not None] + [final]
        before: tuple[list[str], list[str]] = ([], [])
        pieces = []
        for state in chain:
            lists = (state.messages, state.observations)
            if any(items[: len(prior)] != prior for items, prior in zip(lists, before, strict=True)):
                break
            pieces.append(tuple(", ".join(items[len(prior) :]) for items, prior in zip(lists, before, strict=True)))
            before = lists
        else:
            for (point, _), state, piece in zip(kept, chain, pieces, strict=False):
                tx.run(
                    "UPDATE agent_fsm_checkpoints SET state = ?, messages = ?, observations = ?, new_messages = ?,"
                    " new_observations = ? WHERE run_id = ? AND point = ?",
                    (state.text, len(state.messages), len(state.observations), *piece, run_id, point),
                )
            tx.run(
                "UPDATE agent_fsm_runs SET state = ?, messages = ?, observations = ?, new_messages = ?,"
                " new_observations = ? WHERE run_id = ?",
                (final.text, len(final.messages), len(final.observations), *pieces[-1], run_id),
            )


def _nonces(tx: Transaction) -> None:
    """
    Give each run stored before runs had a nonce one of its own, in its row and every checkpoint.

    Its calls from then on are keyed under it, so the run's id in another
    database never shares their keys. A run with an effect in flight, or
    paused on one whose outcome is unknown, is left as it was: that call may
    run again, and only under the key it was first sent with.
    """
    for run_id, intent, reason in tx.rows("SELECT run_id, intent, reason FROM agent_fsm_runs"):
        if intent is not None or (reason or "").startswith(OUTCOME_UNKNOWN):
            continue
        nonce = os.urandom(16).hex()
        stored = [(None, text) for [text] in tx.rows("SELECT state FROM agent_fsm_runs WHERE run_id = ?", (run_id,))]
        stored += tx.rows("SELECT point, state FROM agent_fsm_checkpoints WHERE run_id = ?", (run_id,))
        for point, text in stored:
            try:
                known = "nonce" in json.loads(text) if text else True
            except ValueError:  # a state that cannot be read is left as it was, refused as before
                continue
            if known or not text.endswith("}"):
                continue
            given = f'{text[:-1]}, "nonce": "{nonce}"}}'
            if point is None:
                tx.run("UPDATE agent_fsm_runs SET state = ? WHERE run_id = ?", (given, run_id))
            else:
                tx.run(
                    "UPDATE agent_fsm_checkpoints SET state = ? WHERE run_id = ? AND point = ?", (given, run_id, point)
                )


def _inbox_columns(tx: Transaction) -> None:
    """Fill the inbox's ``tool`` and ``agent`` columns of the runs paused before they existed, from each row."""
    for run_id, blocked, state in tx.rows(
        "SELECT run_id, blocked, state FROM agent_fsm_runs WHERE status = 'paused' AND blocked IS NOT NULL"
    ):
        try:
            tool = json.loads(blocked)["name"]
            if not state:  # the run's row at a checkpoint: its state is the latest checkpoint's (migration 5)
                kept = tx.rows(
                    "SELECT state FROM agent_fsm_checkpoints WHERE run_id = ? ORDER BY point DESC LIMIT 1", (run_id,)
                )
                state = kept[0][0] if kept else "{}"
            agent = json.loads(state).get("agent")
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            continue  # a row this store cannot read stays out of the filters, as it is listed: broken
        tx.run(
            "UPDATE agent_fsm_runs SET tool = ?, agent = ? WHERE run_id = ?",
            (tool if isinstance(tool, str) else None, agent if isinstance(agent, str) else None, run_id),
        )


MIGRATIONS: list[tuple[Step, ...]] = [
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
    # 3: the state at every checkpoint a run can go on from (what a fork starts from), and where a fork came from.
    (
        """CREATE TABLE agent_fsm_checkpoints (
            run_id TEXT NOT NULL,
            point INTEGER NOT NULL,
            machine_state TEXT NOT NULL,
            stop TEXT,
            state TEXT NOT NULL,
            saved_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (run_id, point)
        )""",
        """CREATE TABLE agent_fsm_forks (
            run_id TEXT PRIMARY KEY,
            parent TEXT NOT NULL,
            point INTEGER NOT NULL,
            forked_at DOUBLE PRECISION NOT NULL
        )""",
    ),
    # 4: each message and observation written once (see agent_fsm.store.transcript), stored runs converted.
    (
        "ALTER TABLE agent_fsm_runs ADD COLUMN messages INTEGER",
        "ALTER TABLE agent_fsm_runs ADD COLUMN observations INTEGER",
        "ALTER TABLE agent_fsm_runs ADD COLUMN new_messages TEXT",
        "ALTER TABLE agent_fsm_runs ADD COLUMN new_observations TEXT",
        "ALTER TABLE agent_fsm_checkpoints ADD COLUMN messages INTEGER",
        "ALTER TABLE agent_fsm_checkpoints ADD COLUMN observations INTEGER",
        "ALTER TABLE agent_fsm_checkpoints ADD COLUMN new_messages TEXT",
        "ALTER TABLE agent_fsm_checkpoints ADD COLUMN new_observations TEXT",
        _written_once,
    ),
    # 5: a run's row at a checkpoint holds an empty state, read from its latest checkpoint (agent_fsm.store.sql);
    # no row changes, but a database written so is refused by a store that would read that state as damaged.
    (),
    # 6: each stored run's nonce, which enters its idempotency keys (agent_fsm.engine.RunState.nonce).
    (_nonces,),
    # 7: the inbox at volume (agent_fsm.store.listing): a paused run's tool and agent as columns, the indexes a page
    # of paused runs is sought by (newest pause first, whatever filter), and the claims reviewers put on pauses.
    (
        "ALTER TABLE agent_fsm_runs ADD COLUMN tool TEXT",
        "ALTER TABLE agent_fsm_runs ADD COLUMN agent TEXT",
        _inbox_columns,
        "CREATE INDEX agent_fsm_runs_paused ON agent_fsm_runs (updated_at, run_id) WHERE status = 'paused'",
        "CREATE INDEX agent_fsm_runs_paused_by_tool ON agent_fsm_runs (tool, updated_at, run_id)"
        " WHERE status = 'paused'",
        "CREATE INDEX agent_fsm_runs_paused_by_agent ON agent_fsm_runs (agent, updated_at, run_id)"
        " WHERE status = 'paused'",
        """CREATE TABLE agent_fsm_claims (
            run_id TEXT PRIMARY KEY,
            pause_id TEXT NOT NULL,
            reviewer TEXT NOT NULL,
            claimed_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL
        )""",
        "CREATE INDEX agent_fsm_claims_by_reviewer ON agent_fsm_claims (reviewer, expires_at)",
    ),
    # 8: a durable run's cost flat in its length. Every growing list appended, not rewritten
    # (agent_fsm.store.transcript): a row's prompt sizes, path, screens and compactions added since the checkpoint
    # before, in ``grown``; NULL in every row written before, each holding those lists whole, a base the rows after
    # it add to (so no row changes). And an effect found by its key when its observation settles it, not among
    # every effect of its run.
    (
        "ALTER TABLE agent_fsm_runs ADD COLUMN grown TEXT",
        "ALTER TABLE agent_fsm_checkpoints ADD COLUMN grown TEXT",
        "CREATE INDEX agent_fsm_effects_by_key ON agent_fsm_effects (run_id, idempotency_key)",
    ),
]
"""Migration ``n`` (1-based) is ``MIGRATIONS[n - 1]``: its steps run in order, in one transaction."""


def migrated(tx: Transaction) -> int:
    """The migration the database in ``tx`` is at (0 for a database never opened as a store)."""
    tx.run(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version INTEGER NOT NULL)")
    found = tx.rows(f"SELECT version FROM {VERSION_TABLE}")
    if not found:
        return 0
    version = found[0][0]
    if type(version) is not int or version < 0:
        raise SchemaError(f"the database's schema version is not a migration number: {version!r}")
    return version


def migrate(tx: Transaction, migrations: list[tuple[Step, ...]]) -> int:
    """
    Apply the ``migrations`` the database in ``tx`` lacks; the version it is then at.

    Raises:
        SchemaError: the database was written by a newer agent_fsm (its version is unknown here).
    """
    current = migrated(tx)
    if current > len(migrations):
        raise SchemaError(
            f"the database's schema is at version {current}; this agent_fsm knows versions up to"
            f" {len(migrations)} (upgrade agent_fsm to open it)"
        )
    for statements in migrations[current:]:
        for statement in statements:
            if isinstance(statement, str):
                tx.run(statement)
            else:
                statement(tx)
    if current == 0:
        tx.run(f"DELETE FROM {VERSION_TABLE}")
        tx.run(f"INSERT INTO {VERSION_TABLE} (version) VALUES (?)", (len(migrations),))
    elif current < len(migrations):
        tx.run(f"UPDATE {VERSION_TABLE} SET version = ?", (len(migrations),))
    return len(migrations)
