"""The run stores, SQLite on disk and a real PostgreSQL server, held to the same tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

import agent_fsm.store.sql as sql_module
from agent_fsm import Agent, RunState, ask_for_effects, deny_effects, resume, run
from agent_fsm.examples.demo import TASK, overreaching_model
from agent_fsm.examples.support_desk import make_support_desk, refund_gate
from agent_fsm.store import (
    AlreadyDecided,
    DamagedRun,
    DifferentAgent,
    RunExists,
    RunNotFound,
    RunStore,
    RunTakenOver,
    SchemaError,
    SqliteStore,
    StoreError,
    agent_mismatch,
    approve,
    open_store,
    reject,
)
from agent_fsm.store.schema import MIGRATIONS
from tests.ledger_world import LedgerModel, ledger_tools, pay_gate, read_ledger, task_for

Opener = Callable[[], RunStore]


def test_a_finished_run_is_stored_as_it_ended(opener: Opener) -> None:
    """The stored state is the returned state; status, stop and the effect record say how it went."""
    store = opener()
    desk = make_support_desk()
    result = run(TASK, overreaching_model(), desk.tools, gate=refund_gate, store=store, run_id="r1")
    stored = opener().load("r1")
    assert stored.state == result.state
    assert (stored.status, stored.summary.stop, stored.intent) == ("ended", "answered", None)
    [effect] = store.effects("r1")
    assert (effect.tool, effect.call_id, effect.outcome) == ("refund_order", "call_3", "result")
    assert effect.observed_at is not None and effect.observed_at >= effect.intent_at


def test_a_run_id_is_used_once(opener: Opener) -> None:
    """Beginning a second run under a stored id is refused before anything runs."""
    store = opener()
    run(TASK, overreaching_model(), make_support_desk().tools, gate=refund_gate, store=store, run_id="r1")
    desk = make_support_desk()
    with pytest.raises(RunExists, match="r1"):
        run(TASK, overreaching_model(), desk.tools, gate=refund_gate, store=opener(), run_id="r1")
    assert desk.effects == []


def test_a_stored_run_needs_an_id(opener: Opener) -> None:
    """A store without a run id is a programmer error, said so at once."""
    with pytest.raises(TypeError, match="run_id"):
        run(TASK, overreaching_model(), make_support_desk().tools, store=opener())


def test_the_intent_is_committed_before_the_handler_runs(opener: Opener, tmp_path: Path) -> None:
    """Inside an effectful handler, another connection already reads the intent, under the handler's own key."""
    store, watcher = opener(), opener()
    seen = []
    tools = ledger_tools(tmp_path / "ledger")
    pay = tools["pay"].handler

    def watched_pay(invoice: str, cents: int, context):  # type: ignore[no-untyped-def]
        seen.append((watcher.load("r1").intent, context.idempotency_key))
        return pay(invoice, cents, context)

    tools["pay"] = type(tools["pay"])("Pay.", {"invoice": str, "cents": int}, watched_pay, effectful=True)
    result = run(task_for(["A"]), LedgerModel(), tools, gate=pay_gate, store=store, run_id="r1")
    assert result.stop.value == "answered"
    [(intent, key)] = seen
    assert intent is not None and (intent.tool, intent.idempotency_key) == ("pay", key)
    assert watcher.load("r1").intent is None  # closed by the observation's commit


def test_the_inbox_lists_the_blocked_call_and_the_gates_reason(opener: Opener) -> None:
    """A paused run shows in ``paused()`` with its pause id, the call waiting and why."""
    store = opener()
    desk = make_support_desk()
    run(TASK, overreaching_model(), desk.tools, gate=ask_for_effects(desk.tools), store=store, run_id="p1")
    [waiting] = opener().paused()
    assert waiting.run_id == "p1" and waiting.status == "paused" and waiting.pause_id
    assert waiting.blocked is not None and waiting.blocked.arguments == {"order_id": "A-17", "amount_cents": 9999}
    assert waiting.reason == "refund_order needs a human's approval"


def test_two_concurrent_approvals_exactly_one_wins(opener: Opener) -> None:
    """Two reviewers on two connections approve one pause at once: one continues the run, one gets AlreadyDecided."""
    desk = make_support_desk()
    agent = Agent(overreaching_model(), desk.tools, gate=ask_for_effects(desk.tools))
    agent.run(TASK, store=opener(), run_id="p1")
    pause = opener().paused()[0].pause_id
    stores = [opener(), opener()]
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def decide(reviewer: str, store: RunStore) -> None:
        barrier.wait()
        try:
            outcomes[reviewer] = approve(store, "p1", agent, reviewer=reviewer)
        except AlreadyDecided as exc:
            outcomes[reviewer] = exc

    threads = [threading.Thread(target=decide, args=(name, s)) for name, s in zip(["ana", "bo"], stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lost = [name for name, outcome in outcomes.items() if isinstance(outcome, AlreadyDecided)]
    won = [name for name in outcomes if name not in lost]
    assert len(won) == 1 and len(lost) == 1
    assert desk.effects == [{"order_id": "A-17", "refunded_cents": 9999}]  # the approved call ran once
    [decision] = opener().history("p1")
    assert (decision.pause_id, decision.decision, decision.reviewer) == (pause, "approve", won[0])


def test_racing_decisions_on_the_store_exactly_one_wins(opener: Opener) -> None:
    """Eight connections compare-and-set one pause at the same moment: one decision is taken, seven refused."""
    desk = make_support_desk()
    run(TASK, overreaching_model(), desk.tools, gate=ask_for_effects(desk.tools), store=opener(), run_id="p1")
    pause = opener().paused()[0].pause_id or ""
    stores = [opener() for _ in range(8)]
    barrier = threading.Barrier(len(stores))
    won: list[str] = []
    refused: list[str] = []

    def decide(index: int) -> None:
        barrier.wait()
        try:
            stores[index].decide("p1", pause, "approve", reviewer=f"r{index}")
            won.append(f"r{index}")
        except AlreadyDecided:
            refused.append(f"r{index}")

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and len(refused) == 7
    assert [d.reviewer for d in opener().history("p1")] == won
    assert opener().load("p1").summary.owner == stores[int(won[0][1:])].owner


def test_a_late_decision_names_the_one_that_won(opener: Opener) -> None:
    """Deciding a pause already decided says by whom; the run is untouched."""
    desk = make_support_desk()
    agent = Agent(overreaching_model(), desk.tools, gate=ask_for_effects(desk.tools))
    agent.run(TASK, store=opener(), run_id="p1")
    pause = opener().paused()[0].pause_id
    reject(opener(), "p1", agent, reviewer="ana", reason="too much")
    before = opener().load("p1")
    with pytest.raises(AlreadyDecided, match="ana"):
        opener().decide("p1", pause or "", "approve", reviewer="bo")
    assert opener().load("p1").summary.version == before.summary.version
    assert desk.effects == []


def test_reject_tells_the_model_and_records_the_reviewer(opener: Opener) -> None:
    """A rejection is a denied observation with the reason; the decision is in the history with its time."""
    desk = make_support_desk()
    agent = Agent(overreaching_model(), desk.tools, gate=ask_for_effects(desk.tools))
    agent.run(TASK, store=opener(), run_id="p1")
    result = reject(opener(), "p1", agent, reviewer="ana", reason="over limit")
    assert result.state.observations[1].kind == "denied"
    assert "over limit" in str(result.state.observations[1].content)
    [decision] = opener().history("p1")
    assert (decision.decision, decision.reviewer, decision.reason) == ("reject", "ana", "over limit")
    assert decision.at > 0


def test_an_edited_call_must_pass_contract_and_gate(opener: Opener) -> None:
    """An edit that breaks the contract decides nothing; a valid one runs as edited."""
    desk = make_support_desk()
    agent = Agent(overreaching_model(), desk.tools, gate=ask_for_effects(desk.tools))
    agent.run(TASK, store=opener(), run_id="p1")
    with pytest.raises(ValueError, match="invalid"):
        approve(opener(), "p1", agent, reviewer="ana", arguments={"x": 1})
    assert opener().paused()[0].run_id == "p1"
    edit = {"order_id": "A-17", "amount_cents": 4999}
    approve(opener(), "p1", agent, reviewer="ana", arguments=edit)
    assert desk.effects[0] == {"order_id": "A-17", "refunded_cents": 4999}
    assert opener().history("p1")[0].arguments == edit


def test_a_decision_without_an_agent_decides_nothing(opener: Opener) -> None:
    """Parts passed where the agent goes (a model) are refused before the pause is touched: it stays open."""
    desk = make_support_desk()
    run(TASK, overreaching_model(), desk.tools, gate=ask_for_effects(desk.tools), store=opener(), run_id="p1")
    before = opener().load("p1").summary
    with pytest.raises(TypeError, match="'agent' must be an Agent .*ScriptedModel"):
        approve(opener(), "p1", overreaching_model(), reviewer="ana")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'agent' must be an Agent"):
        reject(opener(), "p1", desk.tools, reviewer="ana", reason="no")  # type: ignore[arg-type]
    after = opener().load("p1").summary
    assert (after.status, after.pause_id, after.version) == ("paused", before.pause_id, before.version)
    assert opener().history("p1") == [] and desk.effects == []


def test_a_claimed_run_cannot_be_written_by_its_old_owner(opener: Opener) -> None:
    """Once another store claims a run, the old owner's next checkpoint raises and writes nothing."""
    first = opener()
    run(TASK, overreaching_model(), make_support_desk().tools, gate=refund_gate, store=first, run_id="ended")
    first.begin("r2", result_state("r2"))
    [taken] = opener().claim_stale(0.0)  # the ended run is never claimed
    assert taken.run_id == "r2" and taken.summary.owner != first.owner
    with pytest.raises(RunTakenOver, match="r2"):
        first.save("r2", taken.state)
    assert opener().load("r2").summary.version == taken.summary.version
    with pytest.raises(RunNotFound):
        first.save("nope", result_state("nope"))
    with pytest.raises(DamagedRun, match="'r2' cannot be committed as run 'nope'"):
        first.save("nope", taken.state)  # another run's state is never committed under this id


def test_the_schema_is_migrated_from_an_older_version(opener: Opener, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database at migration 1 with a run in it is brought to the current version, the run kept."""
    monkeypatch.setattr(sql_module, "MIGRATIONS", MIGRATIONS[:1])
    old = opener()
    assert old.schema_version() == 1  # type: ignore[attr-defined]
    kept = result_state("kept")  # one state: each run has its own run_id, so two runs never compare equal
    with old._transaction() as tx:  # type: ignore[attr-defined]  # the row as the version-1 store wrote it
        tx.run(
            "INSERT INTO agent_fsm_runs (run_id, status, stop, machine_state, state, owner, created_at,"
            " updated_at, version) VALUES ('kept', 'ended', 'answered', ?, ?, 'old', 1.0, 1.0, 1)",
            (kept.machine_state, kept.to_json()),
        )
    monkeypatch.undo()
    store = opener()
    assert store.schema_version() == len(MIGRATIONS)  # type: ignore[attr-defined]
    assert store.load("kept").state == kept
    assert store.effects("kept") == []  # the table migration 2 added
    assert store.checkpoints("kept") == []  # migration 3's: a run stored before it has no checkpoints kept


def test_a_newer_schema_is_refused(opener: Opener, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database written by a newer version is not touched: SchemaError names both versions."""
    opener()
    monkeypatch.setattr(sql_module, "MIGRATIONS", [*MIGRATIONS, ("SELECT 1",)])
    opener()
    monkeypatch.undo()
    with pytest.raises(SchemaError, match=f"version {len(MIGRATIONS) + 1}.*up to {len(MIGRATIONS)}"):
        opener()


def test_open_store_reads_urls(tmp_path: Path) -> None:
    """``sqlite:///PATH`` opens SQLite; anything else unknown is refused with the forms accepted."""
    store = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    assert isinstance(store, SqliteStore) and (tmp_path / "x.db").exists()
    with pytest.raises(ValueError, match="sqlite:///PATH"):
        open_store("mysql://x")


def test_ledger_model_pays_each_invoice_once(tmp_path: Path) -> None:
    """The crash tests' world, uninterrupted: one payment and one receipt per invoice, under distinct keys."""
    ledger = tmp_path / "ledger"
    store = SqliteStore(tmp_path / "runs.db")
    result = run(task_for(["A", "B"]), LedgerModel(), ledger_tools(ledger), gate=pay_gate, store=store, run_id="w")
    effects = [e for e in read_ledger(ledger) if e["event"] == "effect"]
    assert result.stop.value == "answered"
    assert [(e["tool"], e["args"]["invoice"]) for e in effects] == [
        ("pay", "A"),
        ("send_receipt", "A"),
        ("pay", "B"),
        ("send_receipt", "B"),
    ]
    assert len({e["key"] for e in effects}) == 4


def result_state(run_id: str):  # type: ignore[no-untyped-def]
    from agent_fsm import start_state

    return start_state("kept across a migration", run_id=run_id)


def _paused_refund(store: RunStore, run_id: str = "t1"):  # type: ignore[no-untyped-def]
    desk = make_support_desk()
    gate = ask_for_effects(desk.tools)
    paused = run(TASK, overreaching_model(), desk.tools, gate=gate, store=store, run_id=run_id)
    return desk, gate, paused


@pytest.mark.parametrize("signed", [False, True])
def test_a_stale_state_decides_nothing_through_the_store(opener: Opener, signed: bool) -> None:
    """A paused state kept aside and resumed after the store decided its pause: no second refund, nothing written."""
    store = opener()
    desk, gate, paused = _paused_refund(store)
    key = b"k" * 32 if signed else None
    saved = paused.state.to_json(key=key)
    approve(store, "t1", Agent(overreaching_model(), desk.tools, gate=gate), reviewer="ana")
    before = opener().load("t1")
    with pytest.raises(AlreadyDecided, match="t1"):
        resume(
            RunState.from_json(saved, key=key),
            overreaching_model(),
            desk.tools,
            approve=True,
            gate=gate,
            store=store,
            run_id="t1",
        )
    assert desk.effects == [{"order_id": "A-17", "refunded_cents": 9999}]  # paid once
    after = opener().load("t1")
    assert (after.state, after.summary.version) == (before.state, before.summary.version)
    assert len(opener().history("t1")) == 1


def test_a_stale_state_from_another_store_object_is_refused_too(opener: Opener) -> None:
    """The same stale resume through a second store object (another process) is refused before the refund."""
    store = opener()
    desk, gate, paused = _paused_refund(store)
    saved = paused.state.to_json()
    approve(opener(), "t1", Agent(overreaching_model(), desk.tools, gate=gate), reviewer="ana")
    with pytest.raises((AlreadyDecided, RunTakenOver)):
        resume(
            RunState.from_json(saved),
            overreaching_model(),
            desk.tools,
            approve=True,
            gate=gate,
            store=opener(),
            run_id="t1",
        )
    assert len(desk.effects) == 1


def test_a_state_from_an_earlier_pause_is_refused_at_a_later_one(opener: Opener) -> None:
    """A run paused twice: the first pause's state, resumed while the second is open, decides nothing."""
    store = opener()
    desk = make_support_desk()
    gate = ask_for_effects(desk.tools)
    first = run(TASK, overreaching_model(), desk.tools, gate=gate, store=store, run_id="t1")
    saved = first.state.to_json()
    reject(store, "t1", Agent(overreaching_model(), desk.tools, gate=gate), reviewer="ana", reason="too much")
    [second] = opener().paused()  # the model asked again, for 4999
    with pytest.raises(AlreadyDecided):
        resume(
            RunState.from_json(saved),
            overreaching_model(),
            desk.tools,
            approve=True,
            gate=gate,
            store=store,
            run_id="t1",
        )
    assert desk.effects == []
    assert opener().paused() == [second]


def test_a_run_resumed_by_the_store_that_paused_it_goes_on(opener: Opener) -> None:
    """The one legitimate direct resume: the state the run just paused with, on its own store, once."""
    store = opener()
    desk, gate, paused = _paused_refund(store)
    done = resume(paused.state, overreaching_model(), desk.tools, approve=True, gate=gate, store=store, run_id="t1")
    assert done.stop.value == "answered" and len(desk.effects) == 1
    assert opener().load("t1").state == done.state


def test_a_swapped_state_is_refused_before_anything_runs(opener: Opener) -> None:
    """Another run's valid state written into a paused row: the approval refuses it; the 9999 refund never runs."""
    store = opener()
    desk = make_support_desk()
    gate = ask_for_effects(desk.tools)
    run(TASK, overreaching_model(), desk.tools, gate=gate, store=store, run_id="small")
    run(TASK, overreaching_model(), desk.tools, gate=gate, store=store, run_id="big")
    small, big = store.load("small"), store.load("big")
    # What a person with write access to the database can do: the row of "small" now holds "big"'s state.
    with store._transaction() as tx:  # type: ignore[attr-defined]
        tx.run(
            "UPDATE agent_fsm_runs SET state = ?, blocked = ? WHERE run_id = ?",
            (
                big.state.to_json(),
                '{"call_id": "call_2", "name": "refund_order", "arguments": '
                '{"order_id": "A-17", "amount_cents": 5000}}',
                "small",
            ),
        )
    with pytest.raises(StoreError, match="small"):
        approve(
            opener(),
            "small",
            Agent(overreaching_model(), desk.tools, gate=gate),
            reviewer="ana",
            pause_id=small.summary.pause_id,
        )
    assert desk.effects == []
    assert opener().history("small") == []


def test_a_row_whose_blocked_call_disagrees_with_its_state_is_refused(opener: Opener) -> None:
    """The inbox shows the row's blocked call; an approval runs only when the state holds that very call."""
    store = opener()
    desk, gate, _ = _paused_refund(store)
    with store._transaction() as tx:  # type: ignore[attr-defined]
        tx.run(
            "UPDATE agent_fsm_runs SET blocked = ? WHERE run_id = ?",
            (
                '{"call_id": "call_2", "name": "refund_order", "arguments": {"order_id": "A-17", "amount_cents": 50}}',
                "t1",
            ),
        )
    with pytest.raises(StoreError, match="t1"):
        approve(opener(), "t1", Agent(overreaching_model(), desk.tools, gate=gate), reviewer="ana")
    assert desk.effects == []
    assert opener().load("t1").status == "paused"


def test_a_pause_decided_by_another_agent_is_said_and_judged_afresh(opener: Opener) -> None:
    """The pause names its agent; deciding it with another agent warns (DifferentAgent) and its gate judges."""
    desk = make_support_desk()
    paying = Agent(overreaching_model(), desk.tools, gate=ask_for_effects(desk.tools), name="desk")
    store = opener()
    paused = paying.run(TASK, store=store, run_id="t1")
    assert (paused.state.agent, paused.state.agent_digest) == ("desk", paying.digest)
    assert agent_mismatch(store.load("t1").state, paying) is None
    wider = dict(desk.tools)
    wider["refund_order"] = attrs.evolve(desk.tools["refund_order"], description="Refund anything.")
    other = Agent(overreaching_model(), wider, gate=deny_effects(wider), name="night-shift")
    with pytest.warns(DifferentAgent, match="'desk', decided by agent 'night-shift'.*contracts differ"):
        done = approve(store, "t1", other, reviewer="ana")
    assert done.state.observations[-1].kind == "denied"  # the deciding agent's gate refused the refund
    assert opener().effects("t1") == []  # no refund ran
