"""The stored transcript as append-only rows: what a commit writes, and the migration that converts older runs."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import agent_fsm.store.sql as sql_module
from agent_fsm import Agent, Limits, RunState
from agent_fsm.store import DamagedRun, PostgresStore, RunStore, SqliteStore, fork
from agent_fsm.store.schema import MIGRATIONS
from tests.ledger_world import LedgerModel, ledger_agent, ledger_tools, pay_gate, task_for

Opener = Callable[[], RunStore]


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens a new store object (a new connection and owner, as another process would) on one database."""
    if request.param == "sqlite":
        path = tmp_path / "runs.db"
        return lambda: SqliteStore(path)
    dsn = request.getfixturevalue("postgres_dsn")
    return lambda: PostgresStore(dsn)


class _Counting:
    """A transaction that counts the record rows and the bytes of text its write statements are given."""

    def __init__(self, tx: Any) -> None:
        self.tx, self.records, self.bytes = tx, 0, 0

    def run(self, sql: str, params: Any = ()) -> int:
        self.bytes += sum(len(p) for p in params if isinstance(p, str))
        if sql.startswith("INSERT INTO agent_fsm_records"):
            self.records += len(params) // 4
        changed: int = self.tx.run(sql, params)
        return changed

    def rows(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        found: list[tuple[Any, ...]] = self.tx.rows(sql, params)
        return found


def _counted(store: RunStore) -> list[tuple[int, int]]:
    """From now on, ``(record rows, bytes)`` written by each write transaction of ``store``."""
    written: list[tuple[int, int]] = []
    opened = store._transaction  # type: ignore[attr-defined]

    @contextmanager
    def counting(*, write: bool = True, single: bool = False) -> Iterator[Any]:
        with opened(write=write, single=single) as tx:
            counted = _Counting(tx)
            yield counted
        if write:
            written.append((counted.records, counted.bytes))

    store._transaction = counting  # type: ignore[attr-defined]
    return written


def _long_agent(ledger: Path, invoices: int) -> Agent:
    limits = Limits(max_turns=4 * invoices, max_prompt_tokens=10**7)
    return Agent(LedgerModel(), ledger_tools(ledger), gate=pay_gate, limits=limits)


def test_a_commit_writes_only_what_it_adds(opener: Opener, tmp_path: Path) -> None:
    """In a long run each message and observation is written once; a late commit writes about what an early one does."""
    store = opener()
    written = _counted(store)
    invoices = 12
    result = _long_agent(tmp_path / "ledger", invoices).run(
        task_for([f"I-{n}" for n in range(invoices)]), store=store, run_id="long"
    )
    assert result.stop.value == "answered"
    state = result.state
    commits = len(written)
    assert commits > 4 * invoices  # an intent and an observation per effect, the beginning, the ending
    # Each message and observation is one row, written once, by the commit that added it.
    assert sum(rows for rows, _ in written) == len(state.messages) + len(state.observations)
    # At most: a lookup's call, its result and observation, then the payment's call, before its intent.
    assert max(rows for rows, _ in written) <= 4
    # Bytes: the transcript grows by hundreds of bytes a call; what a commit writes grows by its path only.
    transcript = sum(len(json.dumps(m)) for m in state.messages) + sum(len(o.call_id) + 60 for o in state.observations)
    calls = len(state.observations)
    early = sum(b for _, b in written[5:15]) / 10
    late = sum(b for _, b in written[-11:-1]) / 10
    growth_per_call = (late - early) / (calls * (commits - 16) / commits)
    assert growth_per_call < 0.25 * transcript / calls, (early, late, growth_per_call, transcript / calls)
    assert opener().load("long").state == state  # and it reads back whole


def test_a_replaced_message_keeps_the_run_whole_from_there_on(opener: Opener, tmp_path: Path) -> None:
    """A commit whose earlier messages are no longer the stored rows writes its state whole; reading still agrees."""
    store = opener()
    paused = ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=store, run_id="r")
    assert paused.stop.value == "awaiting_approval"
    state = paused.state
    changed = RunState.from_json(state.to_json())
    changed.messages[1] = {**changed.messages[1], "content": changed.messages[1]["content"] + " (edited)"}
    with store._transaction() as tx:  # type: ignore[attr-defined]
        assert store._start(tx, "r", changed, None) is None  # type: ignore[attr-defined]
        assert store._start(tx, "r", state, None) == (len(state.messages), len(state.observations))  # type: ignore[attr-defined]


def test_the_migration_stores_older_runs_as_rows(
    opener: Opener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database at migration 3 (whole states) is converted: states lose their lists to rows and read back equal."""
    source = SqliteStore(tmp_path / "source.db")
    ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=source, run_id="parent")
    final = source.load("parent").state
    kept = [source.checkpoint("parent", c.point) for c in source.checkpoints("parent")]
    odd = RunState.from_json(kept[1].to_json())  # a checkpoint whose messages are not the run's first ones
    odd.messages[1] = {**odd.messages[1], "content": "another task"}
    monkeypatch.setattr(sql_module, "MIGRATIONS", MIGRATIONS[:3])
    old = opener()
    assert old.schema_version() == 3  # type: ignore[attr-defined]
    with old._transaction() as tx:  # type: ignore[attr-defined]  # the rows as the version-3 store wrote them
        tx.run(
            "INSERT INTO agent_fsm_runs (run_id, status, stop, machine_state, state, pause_id, owner, created_at,"
            " updated_at, version) VALUES ('parent', 'paused', 'awaiting_approval', ?, ?, ?, 'old', 1.0, 1.0, 5)",
            (final.machine_state, final.to_json(), final.pause_id),
        )
        for point, state in enumerate([kept[0], odd, *kept[2:]]):
            tx.run(
                "INSERT INTO agent_fsm_checkpoints (run_id, point, machine_state, stop, state, saved_at)"
                " VALUES ('parent', ?, ?, ?, ?, 1.0)",
                (point, state.machine_state, None, state.to_json()),
            )
        tx.run(
            "INSERT INTO agent_fsm_runs (run_id, status, stop, machine_state, state, owner, created_at, updated_at,"
            " version) VALUES ('broken', 'ended', 'answered', 'Answered', '{not json', 'old', 1.0, 1.0, 1)"
        )
    monkeypatch.undo()
    store = opener()
    assert store.schema_version() == len(MIGRATIONS) == 4  # type: ignore[attr-defined]
    assert store.load("parent").state == final
    assert [store.checkpoint("parent", n) for n in range(len(kept))] == [kept[0], odd, *kept[2:]]
    with store._transaction(write=False) as tx:  # type: ignore[attr-defined]
        rows = tx.rows("SELECT count(*) FROM agent_fsm_records WHERE run_id = 'parent'")[0][0]
        counts = tx.rows("SELECT point, messages FROM agent_fsm_checkpoints ORDER BY point")
        stored = tx.rows("SELECT state, messages FROM agent_fsm_runs WHERE run_id = 'parent'")[0]
    assert rows == len(final.messages) + len(final.observations)  # each once
    assert stored[1] == len(final.messages) and '"messages": [], "observations": []' in stored[0]
    assert counts == [
        (0, len(kept[0].messages)),
        (1, None),
        *((n, len(s.messages)) for n, s in enumerate(kept) if n > 1),
    ]
    with pytest.raises(DamagedRun):  # what could not be read is left as it was, refused as before
        store.load("broken")
    # The converted run goes on: decided, and forked from a converted checkpoint.
    forked = fork(store, "parent", at=2, new_run_id="child")
    assert forked.state.messages == kept[2].messages
