"""A stored database put back to the shape an earlier migration left it in, for the tests of later migrations."""

from __future__ import annotations

from typing import Any

from agent_fsm.store.sql import SqlStore
from agent_fsm.store.transcript import split_saved


def before_the_appends(tx: Any) -> None:
    """
    Undo migration 8 in ``tx``'s database: each state holds its growing lists whole but for its transcript's.

    Rows are rewritten latest first, so that each is read from the rows
    before it as today's code wrote them.
    """
    for run_id, text, count, *rest in tx.rows(
        "SELECT run_id, state, messages, new_messages, new_observations, grown FROM agent_fsm_runs"
        " WHERE grown IS NOT NULL AND state != ''"
    ):
        cut = split_saved(SqlStore._whole(tx, run_id, text, count, rest))
        assert cut is not None
        tx.run("UPDATE agent_fsm_runs SET state = ? WHERE run_id = ?", (cut.text, run_id))
    for run_id, point, text, count in tx.rows(
        "SELECT run_id, point, state, messages FROM agent_fsm_checkpoints WHERE grown IS NOT NULL"
        " ORDER BY run_id, point DESC"
    ):
        cut = split_saved(SqlStore._whole(tx, run_id, text, count, point=point))
        assert cut is not None
        tx.run("UPDATE agent_fsm_checkpoints SET state = ? WHERE run_id = ? AND point = ?", (cut.text, run_id, point))
    tx.run("DROP INDEX agent_fsm_effects_by_key")
    tx.run("ALTER TABLE agent_fsm_runs DROP COLUMN grown")
    tx.run("ALTER TABLE agent_fsm_checkpoints DROP COLUMN grown")
    tx.run("UPDATE agent_fsm_schema SET version = 7")


def before_the_inbox(tx: Any, version: int) -> None:
    """
    Undo migrations 8 and 7 (the inbox's columns, indexes and claims) in ``tx``'s database; say it is at ``version``.

    The tests of a migration store runs with today's code (which writes the
    inbox's columns), then take the database back to the shape it had before,
    so that opening it again runs the migrations from ``version`` on.
    """
    before_the_appends(tx)
    tx.run("DROP TABLE agent_fsm_claims")
    for index in ("paused", "paused_by_tool", "paused_by_agent"):
        tx.run(f"DROP INDEX agent_fsm_runs_{index}")
    tx.run("ALTER TABLE agent_fsm_runs DROP COLUMN tool")
    tx.run("ALTER TABLE agent_fsm_runs DROP COLUMN agent")
    tx.run("UPDATE agent_fsm_schema SET version = ?", (version,))
