"""The stores against hostile text and damaged databases: typed answers, nothing lost, no driver exception."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_fsm import Agent, ScriptedModel, ToolCall, Verdict, answer_message, run, tool_call_message
from agent_fsm.store import (
    AlreadyDecided,
    DamagedRun,
    DatabaseError,
    RunNotFound,
    RunStore,
    SqliteStore,
    StoreError,
    approve,
    recover,
    reject,
)
from agent_fsm.store.rows import call_json
from tests.payments import make_payments

Opener = Callable[[], RunStore]

# A lone surrogate is legal in JSON ("\ud800") and so in model text; NUL is legal in both, but not in PostgreSQL text.
HOSTILE = ["\ud800", "\x00", "a\udfffb\x00c"]


def _allow(call: ToolCall) -> Verdict:
    return Verdict.allow("fine")


def _ask_quoting(call: ToolCall) -> Verdict:
    if call.name == "pay":
        return Verdict.ask(f"pay {call.call_id}? ({call.raw_arguments})")
    return Verdict.allow("a read")


def _pay(call_id: str, cents: int = 50) -> dict[str, Any]:
    return tool_call_message(call_id, "pay", {"account": "ACME", "cents": cents})


def _escaped(text: str) -> str:
    """``text`` as a store writes it to a column: NUL and lone surrogates as the saved JSON escapes them."""
    return re.sub("[\x00\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text)


@pytest.mark.parametrize("text", HOSTILE)
def test_a_hostile_call_id_is_stored_and_the_run_ends(opener: Opener, text: str) -> None:
    """An effectful call whose id holds a lone surrogate or NUL: paid once, recorded, the run ends answered."""
    tools, ledger = make_payments()
    model = ScriptedModel([_pay(text), answer_message("done")])
    result = run("pay", model, tools, gate=_allow, store=opener(), run_id="h1")
    assert result.stop.value == "answered" and len(ledger) == 1
    assert opener().load("h1").state == result.state  # the state is kept exactly, whatever its text holds
    [effect] = opener().effects("h1")
    assert (effect.call_id, effect.outcome) == (_escaped(text), "result")


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_gate_reason_quoting_hostile_text_pauses_and_is_decided(opener: Opener, text: str, decision: str) -> None:
    """The pause is stored with its reason escaped; the inbox lists it; the decision and its reviewer are kept."""
    tools, ledger = make_payments()
    model = ScriptedModel([_pay(f"c{text}", 60), answer_message("done")])
    paused = run("pay", model, tools, gate=_ask_quoting, store=opener(), run_id="h1")
    assert paused.stop.value == "awaiting_approval"
    [waiting] = opener().paused()
    assert waiting.reason == _escaped(f"pay c{text}? ({paused.state.pending[0].raw_arguments})")
    assert "\\u" in waiting.reason and waiting.blocked == paused.state.pending[0]
    if decision == "approve":
        done = approve(opener(), "h1", Agent(model, tools, gate=_ask_quoting), reviewer=f"ana{text}")
        assert len(ledger) == 1
    else:
        done = reject(opener(), "h1", Agent(model, tools, gate=_ask_quoting), reviewer=f"bo{text}", reason=f"no {text}")
        assert ledger == []
    assert done.stop.value == "answered"
    [decided] = opener().history("h1")
    assert decided.reviewer.endswith(_escaped(text))
    if decision == "reject":
        assert decided.reason == _escaped(f"no {text}")


def test_recover_goes_on_past_a_run_with_hostile_text(opener: Opener) -> None:
    """Two runs left in flight; the first meets a call id the database cannot hold as such: both are recovered."""
    from agent_fsm import start_state

    store = opener()
    for run_id in ("a-first", "b-second"):
        store.begin(run_id, start_state(f"pay for {run_id}", run_id=run_id))
    tools, ledger = make_payments()

    class Model:
        def chat(self, messages: Any, tools: Any = ()) -> Any:
            if messages[-1]["role"] == "tool":
                return answer_message("done")
            hostile = "a-first" in str(messages[-1].get("content"))
            return _pay("\ud800" if hostile else "c1")

    done = recover(opener(), Agent(Model(), tools, gate=_allow), older_than=0)
    assert sorted((r.run_id, r.error, r.result.stop.value if r.result else None) for r in done) == [
        ("a-first", None, "answered"),
        ("b-second", None, "answered"),
    ]
    assert len(ledger) == 2


def test_recover_reports_a_run_whose_store_fails_and_goes_on(tmp_path: Path) -> None:
    """Whatever a store raises for one run (here a user's store, an OSError), recover says so and goes on."""
    from agent_fsm import start_state

    class Failing(SqliteStore):
        def save(self, run_id: str, state: Any, intent: Any = None) -> None:
            if run_id == "a-first":
                raise OSError(28, "No space left on device")
            super().save(run_id, state, intent)

    store = Failing(tmp_path / "runs.db")
    for run_id in ("a-first", "b-second"):
        store.begin(run_id, start_state("read", run_id=run_id))
    tools, _ = make_payments()
    done = recover(Failing(tmp_path / "runs.db"), Agent(ScriptedModel([answer_message("ok")] * 2), tools), older_than=0)
    outcomes = {r.run_id: (r.error, r.result.stop.value if r.result else None) for r in done}
    assert outcomes["b-second"] == (None, "answered")
    assert outcomes["a-first"][1] is None and "No space left" in (outcomes["a-first"][0] or "")


# --- damaged, foreign and unusable databases ---------------------------------------------------


def _stored_runs(path: Path) -> None:
    tools, _ = make_payments()
    store = SqliteStore(path)
    for index in range(40):  # enough pages for a cut or a scribble to land inside the tables
        run(
            f"pay {index} " + "x" * 400, ScriptedModel([answer_message("done")]), tools, store=store, run_id=f"r{index}"
        )
    store.close()


def _sqlite_read(path: Path) -> None:
    store = SqliteStore(path)
    for summary in store.runs():
        store.load(summary.run_id)
        store.history(summary.run_id)
        store.effects(summary.run_id)


def test_a_file_that_is_not_a_database_is_a_database_error(tmp_path: Path) -> None:
    """A foreign file (text, or another program's bytes) is refused with a typed error naming it."""
    path = tmp_path / "runs.db"
    path.write_bytes(b"this is a spreadsheet, not a database\n" * 200)
    with pytest.raises(DatabaseError, match="runs.db"):
        SqliteStore(path)


def test_a_directory_is_a_database_error(tmp_path: Path) -> None:
    """A path that names a directory is refused with a typed error."""
    with pytest.raises(DatabaseError):
        SqliteStore(tmp_path)


@pytest.mark.parametrize("damage", ["truncated", "scribbled"])
def test_a_damaged_database_is_a_store_error(tmp_path: Path, damage: str) -> None:
    """A database cut short or overwritten in the middle gives a StoreError, never a sqlite3 exception."""
    path = tmp_path / "runs.db"
    _stored_runs(path)
    data = path.read_bytes()
    assert len(data) > 8192
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2 + 100])
    else:
        middle = len(data) // 2
        path.write_bytes(
            data[:4096] + bytes(range(256)) * 16 + data[4096 + 4096 : middle] + b"\xff" * 4096 + data[middle + 4096 :]
        )
    with pytest.raises(StoreError):
        _sqlite_read(path)


def test_a_read_only_database_is_a_database_error_with_the_state(tmp_path: Path) -> None:
    """A database that refuses writes: the run's commit raises a typed error that carries the state."""
    store = SqliteStore(tmp_path / "runs.db")
    store._connection.execute("PRAGMA query_only = ON")  # type: ignore[attr-defined]
    tools, _ = make_payments()
    with pytest.raises(DatabaseError, match="read") as raised:
        run("read", ScriptedModel([answer_message("done")]), tools, store=store, run_id="r1")
    assert raised.value.state is not None


def test_a_full_disk_is_a_database_error_with_the_state(tmp_path: Path) -> None:
    """The database cannot grow (SQLite's own page limit, as a full disk): typed, and the state is handed back."""
    store = SqliteStore(tmp_path / "runs.db")
    tools, _ = make_payments()
    run("first", ScriptedModel([answer_message("done")]), tools, store=store, run_id="r0")
    pages = store._connection.execute("PRAGMA page_count").fetchone()[0]  # type: ignore[attr-defined]
    store._connection.execute(f"PRAGMA max_page_count = {pages}")  # type: ignore[attr-defined]
    model = ScriptedModel([_pay("c1"), answer_message("y" * 200_000)])
    with pytest.raises(DatabaseError, match="full") as raised:
        run("pay", model, tools, gate=_allow, store=store, run_id="r1")
    assert raised.value.state is not None and raised.value.state.run_id == "r1"
    assert not isinstance(raised.value.__cause__, StoreError)


def _set(opener: Opener, sql: str, params: tuple[Any, ...]) -> None:
    store = opener()
    with store._transaction() as tx:  # type: ignore[attr-defined]
        tx.run(sql, params)


@pytest.mark.parametrize(
    ("column", "value"),
    [("intent", "not json"), ("intent", '{"call_id": 1}'), ("blocked", "{"), ("blocked", "[1, 2]"), ("state", "{}")],
)
def test_a_garbage_text_column_is_a_damaged_run(opener: Opener, column: str, value: str) -> None:
    """A row written by something else: load() says DamagedRun; the list still reads, showing the row as broken."""
    tools, _ = make_payments()
    run("read", ScriptedModel([answer_message("done")]), tools, store=opener(), run_id="r1")
    run("read", ScriptedModel([answer_message("done")]), tools, store=opener(), run_id="ok")
    _set(opener, f"UPDATE agent_fsm_runs SET {column} = ? WHERE run_id = ?", (value, "r1"))
    with pytest.raises(DamagedRun, match="r1"):
        opener().load("r1")
    listed = {s.run_id: s for s in opener().runs()}
    assert listed["ok"].problem is None
    if column == "blocked":
        assert listed["r1"].problem is not None and "r1" in listed["r1"].problem


@pytest.mark.parametrize(("column", "value"), [("created_at", "yesterday"), ("version", "seven"), ("updated_at", "")])
def test_a_garbage_number_column_is_a_damaged_run(tmp_path: Path, column: str, value: Any) -> None:
    """SQLite keeps any value in any column: a garbage time or version is one broken row, typed."""
    path = tmp_path / "runs.db"
    tools, _ = make_payments()
    run("read", ScriptedModel([answer_message("done")]), tools, store=SqliteStore(path), run_id="r1")
    run("read", ScriptedModel([answer_message("done")]), tools, store=SqliteStore(path), run_id="ok")
    store = SqliteStore(path)
    store._connection.execute(f"UPDATE agent_fsm_runs SET {column} = ? WHERE run_id = 'r1'", (value,))  # type: ignore[attr-defined]
    with pytest.raises(DamagedRun, match="r1"):
        SqliteStore(path).load("r1")
    listed = {s.run_id: s for s in SqliteStore(path).runs()}
    assert listed["ok"].problem is None and listed["r1"].problem is not None


def test_a_decided_pause_restored_to_paused_is_already_decided(opener: Opener) -> None:
    """A row put back to a pause that was decided (a restored backup): the decision is refused as AlreadyDecided."""
    tools, ledger = make_payments()
    model = ScriptedModel([_pay("c1", 60), answer_message("done")])
    run("pay", model, tools, gate=_ask_quoting, store=opener(), run_id="h1")
    row = opener().load("h1")
    reject(opener(), "h1", Agent(model, tools, gate=_ask_quoting), reviewer="ana", reason="no")
    _set(
        opener,
        "UPDATE agent_fsm_runs SET status = 'paused', stop = 'awaiting_approval', machine_state = 'AwaitingApproval',"
        " state = ?, pause_id = ?, blocked = ?, reason = ? WHERE run_id = ?",
        (row.state.to_json(), row.summary.pause_id, call_json(row.state.pending[0]), row.summary.reason, "h1"),
    )
    with pytest.raises(AlreadyDecided, match="ana"):
        approve(opener(), "h1", Agent(model, tools, gate=_ask_quoting), reviewer="bo")
    assert ledger == []


def test_a_run_id_the_database_cannot_hold_is_not_found(opener: Opener) -> None:
    """Looking up a run id with NUL or a lone surrogate finds nothing (no driver error); beginning one is refused."""
    store = opener()
    for run_id in ("a\x00b", "\ud800"):
        with pytest.raises(RunNotFound):
            store.load(run_id)
        with pytest.raises(RunNotFound):
            store.decide(run_id, "p", "approve", reviewer="ana")
        assert store.history(run_id) == [] and store.effects(run_id) == []
        with pytest.raises(ValueError, match="NUL"):
            run("t", ScriptedModel([answer_message("x")]), make_payments()[0], store=store, run_id=run_id)
    assert store.runs("\x00") == []
