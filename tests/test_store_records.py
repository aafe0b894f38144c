"""The stored transcript as append-only rows: what a commit writes, and the migration that converts older runs."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import agent_fsm.store.sql as sql_module
from agent_fsm import (
    Agent,
    Intent,
    Limits,
    RunState,
    ScriptedModel,
    ToolSpec,
    allow_all,
    answer_message,
    start_state,
    tool_call_message,
)
from agent_fsm.engine import GROWING
from agent_fsm.store import DamagedRun, RunStore, RunTakenOver, SqliteStore, approve, fork
from agent_fsm.store.schema import MIGRATIONS
from agent_fsm.store.transcript import parts
from tests.ledger_world import LedgerModel, ledger_agent, ledger_tools, pay_gate, task_for
from tests.store_versions import before_the_appends, before_the_inbox

Opener = Callable[[], RunStore]


class _Counting:
    """A transaction that counts the bytes of text its write statements are given."""

    def __init__(self, tx: Any) -> None:
        self.tx, self.bytes = tx, 0

    def run(self, sql: str, params: Any = ()) -> int:
        self.bytes += sum(len(p) for p in params if isinstance(p, str))
        changed: int = self.tx.run(sql, params)
        return changed

    def rows(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        found: list[tuple[Any, ...]] = self.tx.rows(sql, params)
        return found


def _counted(store: RunStore) -> list[int]:
    """From now on, the bytes of text written by each write transaction of ``store``."""
    written: list[int] = []
    opened = store._transaction  # type: ignore[attr-defined]

    @contextmanager
    def counting(*, write: bool = True, single: bool = False) -> Iterator[Any]:
        with opened(write=write, single=single) as tx:
            counted = _Counting(tx)
            yield counted
        if write:
            written.append(counted.bytes)

    store._transaction = counting  # type: ignore[attr-defined]
    return written


def _long_agent(ledger: Path, invoices: int) -> Agent:
    limits = Limits(max_turns=4 * invoices, max_prompt_tokens=10**7)
    return Agent(LedgerModel(), ledger_tools(ledger), gate=pay_gate, limits=limits)


def test_a_commit_writes_only_what_it_adds(opener: Opener, tmp_path: Path) -> None:
    """In a long run each message and observation is kept once; a late commit writes about what an early one does."""
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
    # Each message and observation is in exactly one checkpoint's piece, in order.
    whole = parts(state)
    assert whole is not None
    with store._transaction(write=False) as tx:  # type: ignore[attr-defined]
        pieces = tx.rows(
            "SELECT new_messages, new_observations FROM agent_fsm_checkpoints WHERE run_id = 'long' ORDER BY point"
        )
    assert ", ".join(p[0] for p in pieces if p[0]) == ", ".join(whole.messages)
    assert ", ".join(p[1] for p in pieces if p[1]) == ", ".join(whole.observations)
    # Bytes: the transcript grows by hundreds of bytes a call; what a commit writes grows by its path only.
    transcript = (len(", ".join(whole.messages)) + len(", ".join(whole.observations))) / len(state.observations)
    early, late = sum(written[5:15]) / 10, sum(written[-11:-1]) / 10
    growth_per_call = (late - early) / (len(state.observations) * (commits - 16) / commits)
    assert growth_per_call < 0.25 * transcript, (early, late, growth_per_call, transcript)
    assert opener().load("long").state == state  # and it reads back whole


def _lengths(state: RunState) -> tuple[int, ...]:
    return tuple(len(getattr(state, name)) for name in GROWING)


def test_a_replaced_message_is_committed_whole(opener: Opener, tmp_path: Path) -> None:
    """A state whose earlier messages are not the stored ones is committed whole; one that continues them is not."""
    store = opener()
    paused = ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=store, run_id="r")
    assert paused.stop.value == "awaiting_approval"
    state = paused.state
    changed = RunState.from_json(state.to_json())
    changed.messages[1] = {**changed.messages[1], "content": changed.messages[1]["content"] + " (edited)"}
    with store._transaction() as tx:  # type: ignore[attr-defined]
        assert store._since(tx, "r", changed, None) is None  # type: ignore[attr-defined]
        assert store._since(tx, "r", state, None) == _lengths(state)  # type: ignore[attr-defined]


def test_a_held_state_is_checked_by_its_last_items_not_item_by_item(opener: Opener, tmp_path: Path) -> None:
    """The store holds a count and the last object per list of a run in flight, so a commit's check stays constant."""
    store = opener()
    state = ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=store, run_id="r").state
    counts = _lengths(state)
    marks = sql_module._written(state)
    # Not a copy of the lists: what is held per run does not grow with its transcript.
    assert marks == tuple((len(items), items[-1] if items else None) for items in map(state.__getattribute__, GROWING))
    held = sql_module._Held(1, None, marks, counts)
    with store._transaction() as tx:  # type: ignore[attr-defined]
        assert store._since(tx, "r", state, held) == counts  # type: ignore[attr-defined]
        state.messages.append({"role": "user", "content": "more"})
        assert store._since(tx, "r", state, held) == counts  # type: ignore[attr-defined]  # appended: continues
        state.messages[counts[0] - 1] = dict(state.messages[counts[0] - 1])  # the last one stored, replaced
        assert store._since(tx, "r", state, held) is None  # type: ignore[attr-defined]
        state.messages[counts[0] - 1 :] = []  # shorter than what is stored
        assert store._since(tx, "r", state, held) is None  # type: ignore[attr-defined]


def test_a_load_reads_the_run_as_of_one_moment_while_its_owner_commits(opener: Opener) -> None:
    """A checkpoint committed between a load's read of the run's row and of its pieces is not mixed into the state."""
    writer = opener()
    state = start_state("read", run_id="r")
    writer.begin("r", state)
    state.messages.append({"role": "user", "content": "and more"})
    writer.save("r", state, Intent("c1", "pay", "f" * 64, "k1"))  # the row holds the piece added since checkpoint 0
    reader = opener()
    opened = reader._transaction  # type: ignore[attr-defined]
    committed: list[bool] = []

    class Interleaved:
        """A read transaction during which, after its first statement, the run's owner commits its next checkpoint."""

        def __init__(self, tx: Any) -> None:
            self.tx = tx

        def rows(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
            found: list[tuple[Any, ...]] = self.tx.rows(sql, params)
            if not committed:
                committed.append(True)
                writer.save("r", state)  # checkpoint 1 holds the piece the row held
            return found

    @contextmanager
    def interleaved(*, write: bool = True, single: bool = False) -> Iterator[Any]:
        with opened(write=write, single=single) as tx:
            yield Interleaved(tx)

    reader._transaction = interleaved  # type: ignore[attr-defined]
    loaded = reader.load("r").state
    assert committed and [m["content"] for m in loaded.messages] == [m["content"] for m in state.messages]


def test_the_migration_keeps_older_runs_once(opener: Opener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database at migration 3 (whole states) is converted; each state reads back equal; what cannot be, is left."""
    source = SqliteStore(tmp_path / "source.db")
    for run_id in ("clean", "odd"):
        ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=source, run_id=run_id)
    final = {run_id: source.load(run_id).state for run_id in ("clean", "odd")}
    kept = {run_id: [source.checkpoint(run_id, c.point) for c in source.checkpoints(run_id)] for run_id in final}
    odd = RunState.from_json(kept["odd"][1].to_json())  # a checkpoint whose messages are not the run's first ones
    odd.messages[1] = {**odd.messages[1], "content": "another task"}
    kept["odd"][1] = odd
    monkeypatch.setattr(sql_module, "MIGRATIONS", MIGRATIONS[:3])
    old = opener()
    assert old.schema_version() == 3  # type: ignore[attr-defined]
    with old._transaction() as tx:  # type: ignore[attr-defined]  # the rows as the version-3 store wrote them
        for run_id, state in final.items():
            tx.run(
                "INSERT INTO agent_fsm_runs (run_id, status, stop, machine_state, state, pause_id, owner, created_at,"
                " updated_at, version) VALUES (?, 'paused', 'awaiting_approval', ?, ?, ?, 'old', 1.0, 1.0, 5)",
                (run_id, state.machine_state, state.to_json(), state.pause_id),
            )
            for point, at in enumerate(kept[run_id]):
                tx.run(
                    "INSERT INTO agent_fsm_checkpoints (run_id, point, machine_state, stop, state, saved_at)"
                    " VALUES (?, ?, ?, NULL, ?, 1.0)",
                    (run_id, point, at.machine_state, at.to_json()),
                )
        tx.run(
            "INSERT INTO agent_fsm_runs (run_id, status, stop, machine_state, state, owner, created_at, updated_at,"
            " version) VALUES ('broken', 'ended', 'answered', 'Answered', '{not json', 'old', 1.0, 1.0, 1)"
        )
    monkeypatch.undo()
    store = opener()
    assert store.schema_version() == len(MIGRATIONS)  # type: ignore[attr-defined]
    for run_id in final:
        assert store.load(run_id).state == final[run_id]
        assert [store.checkpoint(run_id, n) for n in range(len(kept[run_id]))] == kept[run_id]
    with store._transaction(write=False) as tx:  # type: ignore[attr-defined]
        rows = dict(tx.rows("SELECT run_id, state FROM agent_fsm_runs"))
        counts = tx.rows("SELECT run_id, messages FROM agent_fsm_checkpoints ORDER BY run_id, point")
    assert '"messages": [], "observations": []' in rows["clean"]  # converted: the lists are kept once
    assert [c for r, c in counts if r == "clean"] == [len(s.messages) for s in kept["clean"]]
    assert rows["odd"] == final["odd"].to_json() and {c for r, c in counts if r == "odd"} == {None}  # left whole
    with pytest.raises(DamagedRun):  # what could not be read is left as it was, refused as before
        store.load("broken")
    # A converted run goes on: forked from a converted checkpoint, and the fork commits as any run.
    forked = fork(store, "clean", at=2, new_run_id="child")
    assert forked.state.messages == kept["clean"][2].messages
    assert store.checkpoint("child", 0).messages == kept["clean"][2].messages


def test_a_missing_piece_is_refused_clearly(opener: Opener, tmp_path: Path) -> None:
    """A checkpoint's piece removed by something else: the run and the later checkpoints are DamagedRun, not a crash."""
    store = opener()
    ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=store, run_id="r")
    with store._transaction() as tx:  # type: ignore[attr-defined]
        tx.run("UPDATE agent_fsm_checkpoints SET new_messages = NULL WHERE run_id = 'r' AND point = 1")
        tx.run("UPDATE agent_fsm_checkpoints SET new_observations = '{' WHERE run_id = 'r' AND point = 2")
    reader = opener()
    assert reader.checkpoint("r", 0).machine_state == "Ready"  # before the damage: read as it was
    with pytest.raises(DamagedRun, match="not text"):
        reader.checkpoint("r", 1)
    with pytest.raises(DamagedRun):
        reader.load("r")
    with store._transaction() as tx:  # type: ignore[attr-defined]
        tx.run("UPDATE agent_fsm_checkpoints SET new_messages = '' WHERE run_id = 'r' AND point = 1")
    with pytest.raises(DamagedRun, match="checkpoint 1"):  # a piece left out: the strict reader refuses the state
        reader.checkpoint("r", 1)
    assert [summary.run_id for summary in reader.runs()] == ["r"]  # the list still reads


def test_a_run_row_at_a_checkpoint_holds_no_copy_of_its_state(opener: Opener, tmp_path: Path) -> None:
    """At a checkpoint the run's row holds no state (the checkpoint's, written once); in flight, it does."""
    store, seen = opener(), []

    def row_state() -> str:
        with opener()._transaction(write=False) as tx:  # type: ignore[attr-defined]  # another connection
            return str(tx.rows("SELECT state FROM agent_fsm_runs WHERE run_id = 'r'")[0][0])

    def pay(cents: int) -> str:
        seen.append(row_state())  # the intent is committed: the row holds the state it was committed with
        return "paid"

    script = [tool_call_message("c1", "pay", {"cents": 5}), answer_message("done")]
    tools = {"pay": ToolSpec("Pay.", {"cents": int}, pay, effectful=True)}
    result = Agent(ScriptedModel(script), tools, gate=allow_all).run("pay 5", store=store, run_id="r")
    assert result.stop.value == "answered"
    [in_flight] = seen
    assert in_flight.startswith('{"format": ') and '"machine_state": "Executing"' in in_flight
    assert row_state() == ""  # at rest: the state is the latest checkpoint's only
    assert opener().load("r").state == result.state
    assert opener().checkpoint("r", len(store.checkpoints("r")) - 1) == result.state


def test_a_run_row_whose_checkpoint_is_gone_is_damaged(opener: Opener, tmp_path: Path) -> None:
    """The state of a run's row at a checkpoint is read from that checkpoint: if it was deleted, DamagedRun says so."""
    store = opener()
    ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=store, run_id="r")
    assert opener().load("r").status == "paused"
    with store._transaction() as tx:  # type: ignore[attr-defined]
        tx.run("DELETE FROM agent_fsm_checkpoints WHERE run_id = 'r'")
    with pytest.raises(DamagedRun, match="checkpoint is missing"):
        opener().load("r")
    assert [summary.run_id for summary in opener().runs()] == ["r"]  # the list still reads


def test_sqlite_checkpoints_its_wal_seldom_and_keeps_its_durability_setting(tmp_path: Path) -> None:
    """The WAL is copied back every WAL_PAGES pages, on every connection; synchronous and the WAL mode are as asked."""
    from agent_fsm.store.sqlite import WAL_PAGES

    for synchronous, code in (("NORMAL", 1), ("FULL", 2)):
        store = SqliteStore(tmp_path / f"{synchronous}.db", synchronous=synchronous)
        connection = store._connection
        assert connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == WAL_PAGES == 10_000
        assert connection.execute("PRAGMA synchronous").fetchone()[0] == code
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        store.close()


class _Died(BaseException):
    """The process dying inside a handler: nothing in the engine catches it, so the intent stays open."""


def _strip_nonces(tx: Any) -> None:
    """Every stored state as a store before run nonces wrote it: without its ``nonce`` field."""
    for table, key in (("agent_fsm_runs", "run_id"), ("agent_fsm_checkpoints", "run_id, point")):
        for row in tx.rows(f"SELECT {key}, state FROM {table}"):
            *where, text = row
            if text:
                data = json.loads(text)
                data.pop("nonce", None)
                clause = " AND ".join(f"{name.strip()} = ?" for name in key.split(","))
                tx.run(f"UPDATE {table} SET state = ? WHERE {clause}", (json.dumps(data), *where))


def test_the_migration_gives_stored_runs_a_nonce_but_not_an_effect_in_flight(
    opener: Opener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs stored before nonces get one each (checkpoints too); a run with an effect in flight keeps its keys."""
    old = opener()
    ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=old, run_id="paused")

    def dies(cents: int) -> str:
        raise _Died

    tools = {"pay": ToolSpec("Pay.", {"cents": int}, dies, effectful=True)}
    with pytest.raises(_Died):
        Agent(ScriptedModel([tool_call_message("c1", "pay", {"cents": 5})]), tools, gate=allow_all).run(
            "pay 5", store=old, run_id="in-flight"
        )
    with old._transaction() as tx:  # type: ignore[attr-defined]
        _strip_nonces(tx)  # every state as a store at migration 5 holds it
    assert opener().load("paused").state.nonce == ""  # read as a state saved before nonces
    in_flight = opener().load("in-flight")
    assert in_flight.intent is not None and in_flight.state.nonce == ""
    monkeypatch.setattr(sql_module, "MIGRATIONS", MIGRATIONS[:5])  # the database as migration 5 left it
    with old._transaction() as tx:  # type: ignore[attr-defined]
        before_the_inbox(tx, 5)
    monkeypatch.undo()
    store = opener()
    paused = store.load("paused").state
    assert len(paused.nonce) == 32
    assert {store.checkpoint("paused", c.point).nonce for c in store.checkpoints("paused")} == {paused.nonce}
    kept = store.load("in-flight")
    assert kept.state.nonce == "" and kept.intent is not None  # its key is the one the effect was sent with
    assert kept.intent.idempotency_key == in_flight.intent.idempotency_key


def test_a_deleted_checkpoint_row_is_damage_not_a_shorter_run(opener: Opener, tmp_path: Path) -> None:
    """A checkpoint row deleted from the middle: the run and every later checkpoint are DamagedRun, not shorter."""
    store = opener()
    ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=store, run_id="r")
    points = [c.point for c in store.checkpoints("r")]
    assert len(points) >= 4
    with store._transaction() as tx:  # type: ignore[attr-defined]
        tx.run("DELETE FROM agent_fsm_checkpoints WHERE run_id = 'r' AND point = 1")
    reader = opener()
    assert reader.checkpoint("r", 0).machine_state == "Ready"  # before the gap: read as it was
    with pytest.raises(DamagedRun, match="checkpoint 1 is missing"):
        reader.checkpoint("r", 2)
    with pytest.raises(DamagedRun, match="checkpoint 1 is missing"):
        reader.load("r")
    assert [summary.run_id for summary in reader.runs()] == ["r"]  # the list still reads


def test_a_deleted_latest_checkpoint_row_is_damage_not_an_earlier_state(opener: Opener, tmp_path: Path) -> None:
    """The latest checkpoint row deleted: the run is DamagedRun, not read back as the checkpoint before it."""
    store = opener()
    ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=store, run_id="r")
    last = store.checkpoints("r")[-1].point
    with store._transaction() as tx:  # type: ignore[attr-defined]
        tx.run("DELETE FROM agent_fsm_checkpoints WHERE run_id = 'r' AND point = ?", (last,))
    with pytest.raises(DamagedRun, match="checkpoint is missing"):
        opener().load("r")


def _kept(store: RunStore, run_id: str) -> list[tuple[Any, ...]]:
    with store._transaction(write=False) as tx:  # type: ignore[attr-defined]
        return tx.rows(
            "SELECT point, messages, grown, state FROM agent_fsm_checkpoints WHERE run_id = ? ORDER BY point", (run_id,)
        )


def test_every_growing_list_is_kept_once_and_read_back(opener: Opener, tmp_path: Path) -> None:
    """The path, the prompt sizes and every list declared ``grows`` are in one row each item, not in every row."""
    store = opener()
    invoices = 6
    state = (
        _long_agent(tmp_path / "ledger", invoices)
        .run(task_for([f"I-{n}" for n in range(invoices)]), store=store, run_id="long")
        .state
    )
    rows = _kept(store, "long")
    for name in GROWING[2:]:  # the transcript's lists have columns of their own
        added = [item for _, _, grown, _ in rows for item in json.loads(grown).get(name, [0, []])[1]]
        assert added == json.loads(state.to_json())[name], name
    path = '"path": []'
    assert all(path in text for _, _, _, text in rows)  # no checkpoint holds the path it took
    reader = opener()
    assert reader.load("long").state == state
    for point, *_ in rows:
        at = reader.checkpoint("long", point)
        assert at.path == state.path[: len(at.path)] and at.prompt_token_log == state.prompt_token_log[: at.turns]


def test_a_commit_written_whole_is_continued_by_the_next(opener: Opener, tmp_path: Path) -> None:
    """After a commit whose lists did not continue what was stored (written whole), the next ones add to it again."""
    store = opener()
    state = start_state("read", run_id="r")
    store.begin("r", state)
    for n in range(3):
        state.messages.append({"role": "user", "content": f"more {n}"})
        state.path.append("Ready")
        store.save("r", state)
    state.path[-1] = "Proposing"  # the last item replaced: what is stored is not the start of the path any more
    store.save("r", state)
    for n in range(2):
        state.messages.append({"role": "user", "content": f"later {n}"})
        state.path.append("Ready")
        store.save("r", state)
    rows = _kept(store, "r")
    assert [count is None for _, count, _, _ in rows] == [False] * 4 + [True] + [False] * 2  # one whole row
    assert rows[-1][3].count('"path": []') == 1  # and the rows after it add to it
    reader = opener()
    assert reader.load("r").state == state
    assert reader.checkpoint("r", 3).path == ["Ready"] * 3
    assert reader.checkpoint("r", 4).path == ["Ready", "Ready", "Proposing"]
    assert reader.checkpoint("r", 5).path == state.path[:4]


def test_a_damaged_growing_column_is_refused_clearly(opener: Opener, tmp_path: Path) -> None:
    """A ``grown`` column that is not what this store writes, or disagrees with the rows before it, is DamagedRun."""
    store = opener()
    ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=store, run_id="r")
    last = store.checkpoints("r")[-1].point
    reader = opener()
    assert reader.checkpoint("r", 1).path
    with store._transaction() as tx:  # type: ignore[attr-defined]
        tx.run("UPDATE agent_fsm_checkpoints SET grown = '[1' WHERE run_id = 'r' AND point = 1")
    with pytest.raises(DamagedRun, match="growing lists of a checkpoint"):
        reader.checkpoint("r", 1)
    with store._transaction() as tx:  # type: ignore[attr-defined]
        tx.run("UPDATE agent_fsm_checkpoints SET grown = '{}' WHERE run_id = 'r' AND point = 1")  # its items gone
    with pytest.raises(DamagedRun, match="not the length its row records"):
        reader.load("r")
    assert reader.checkpoint("r", 0).machine_state == "Ready" and last > 1  # before the damage: read as it was


def test_the_migration_to_appends_keeps_older_runs_and_they_go_on(opener: Opener, tmp_path: Path) -> None:
    """Rows written before ``grown`` are read as they are, and a run stored so goes on, appended from then on."""
    old = opener()
    paused = ledger_agent(tmp_path / "ledger").run(task_for(["A", "BIG-1"]), store=old, run_id="r").state
    before = [old.checkpoint("r", c.point) for c in old.checkpoints("r")]
    with old._transaction() as tx:  # type: ignore[attr-defined]
        before_the_appends(tx)  # every row as a store at migration 7 wrote it
        assert '"path": ["' in tx.rows("SELECT state FROM agent_fsm_checkpoints WHERE point = 1")[0][0]
    store = opener()
    assert store.schema_version() == len(MIGRATIONS)  # type: ignore[attr-defined]
    assert store.load("r").state == paused
    assert [store.checkpoint("r", n) for n in range(len(before))] == before
    result = approve(store, "r", ledger_agent(tmp_path / "ledger"), reviewer="ana")
    assert result.stop.value == "answered"
    assert opener().load("r").state == result.state
    rows = _kept(store, "r")
    assert rows[len(before)][2] is None and rows[len(before)][1] is None  # the first commit after: written whole
    assert all(grown is not None for _, _, grown, _ in rows[len(before) + 1 :])  # then appended
    assert [opener().checkpoint("r", n) for n in range(len(before))] == before


def test_a_commit_racing_another_store_is_refused_not_read_as_damaged(opener: Opener) -> None:
    """A store committing a run another holds, while that one commits its next checkpoint, is refused cleanly."""
    owner = opener()
    state = start_state("race", run_id="r")
    owner.begin("r", state)
    state.messages.append({"role": "user", "content": "in flight"})
    state.path.append("Ready")
    owner.save("r", state, Intent("c1", "pay", "f" * 64, "k1"))  # the row holds the pieces added since checkpoint 0
    other = opener()
    opened = other._transaction  # type: ignore[attr-defined]
    landed: list[threading.Thread] = []

    def next_checkpoint() -> None:
        state.messages.append({"role": "user", "content": "observed"})
        state.path.append("Proposing")
        owner.save("r", state)

    class Racing:
        """A write transaction during which, after it read the run's row, the owner commits its next checkpoint."""

        def __init__(self, tx: Any) -> None:
            self.tx = tx

        def rows(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
            found: list[tuple[Any, ...]] = self.tx.rows(sql, params)
            if not landed and "FROM agent_fsm_runs" in sql:
                landed.append(threading.Thread(target=next_checkpoint))
                landed[0].start()
                landed[0].join(timeout=1.0)  # lands now unless the row read is locked until this commit ends
            return found

        def run(self, sql: str, params: Any = ()) -> int:
            changed: int = self.tx.run(sql, params)
            return changed

    @contextmanager
    def racing(*, write: bool = True, single: bool = False) -> Iterator[Any]:
        with opened(write=write, single=single) as tx:
            yield Racing(tx) if write else tx

    other._transaction = racing  # type: ignore[attr-defined]
    copy = RunState.from_json(state.to_json())
    with pytest.raises(RunTakenOver):
        other.save("r", copy)
    landed[0].join()
    assert opener().load("r").state == state  # and the owner's commit went through
