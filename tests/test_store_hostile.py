"""The stores against hostile text and damaged databases: typed answers, nothing lost, no driver exception."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_fsm import ScriptedModel, ToolCall, Verdict, answer_message, run, tool_call_message
from agent_fsm.store import PostgresStore, RunStore, SqliteStore, approve, recover, reject
from tests.payments import make_payments

Opener = Callable[[], RunStore]

# A lone surrogate is legal in JSON ("\ud800") and so in model text; NUL is legal in both, but not in PostgreSQL text.
HOSTILE = ["\ud800", "\x00", "a\udfffb\x00c"]


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens a new store object on one database (SQLite on disk, or the real PostgreSQL server)."""
    if request.param == "sqlite":
        path = tmp_path / "runs.db"
        return lambda: SqliteStore(path)
    dsn = request.getfixturevalue("postgres_dsn")
    return lambda: PostgresStore(dsn)


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
        done = approve(opener(), "h1", model, tools, gate=_ask_quoting, reviewer=f"ana{text}")
        assert len(ledger) == 1
    else:
        done = reject(opener(), "h1", model, tools, gate=_ask_quoting, reviewer=f"bo{text}", reason=f"no {text}")
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

    done = recover(opener(), Model(), tools, gate=_allow, older_than=0)
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
    done = recover(Failing(tmp_path / "runs.db"), ScriptedModel([answer_message("ok")] * 2), tools, older_than=0)
    outcomes = {r.run_id: (r.error, r.result.stop.value if r.result else None) for r in done}
    assert outcomes["b-second"] == (None, "answered")
    assert outcomes["a-first"][1] is None and "No space left" in (outcomes["a-first"][0] or "")
