"""A stored database put back to the shape an earlier migration left it in, for the tests of later migrations."""

from __future__ import annotations

from typing import Any


def before_the_inbox(tx: Any, version: int) -> None:
    """
    Undo migration 7 (the inbox's columns, indexes and claims) in ``tx``'s database and say it is at ``version``.

    The tests of a migration store runs with today's code (which writes the
    inbox's columns), then take the database back to the shape it had before,
    so that opening it again runs the migrations from ``version`` on.
    """
    tx.run("DROP TABLE agent_fsm_claims")
    for index in ("paused", "paused_by_tool", "paused_by_agent"):
        tx.run(f"DROP INDEX agent_fsm_runs_{index}")
    tx.run("ALTER TABLE agent_fsm_runs DROP COLUMN tool")
    tx.run("ALTER TABLE agent_fsm_runs DROP COLUMN agent")
    tx.run("UPDATE agent_fsm_schema SET version = ?", (version,))
