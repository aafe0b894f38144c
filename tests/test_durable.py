"""Checkpoints, tool contexts, retries and recovery: the kernel's side of durable runs, on a real SQLite store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_fsm import Agent, Limits, ToolContext, ToolDefinitionError, ToolError, ToolSpec, run, tool_call_message
from agent_fsm.engine import ScriptedModel, ToolCall, answer_message
from agent_fsm.engine import call_fingerprint as fingerprint
from agent_fsm.engine._boundary import idempotency_key
from agent_fsm.store import OUTCOME_UNKNOWN, AlreadyDecided, SqliteStore, approve, recover, reject
from tests.ledger_world import LedgerModel, ledger_agent, ledger_tools, pay_gate, read_ledger, task_for


class Crash(BaseException):
    """Stands for the process dying: nothing in the engine catches it, so no later checkpoint is written."""


def _crashing(tools: dict[str, ToolSpec], name: str, *, after_effect: bool) -> dict[str, ToolSpec]:
    """``tools`` with ``name`` dying once, before or after its real effect."""
    spec = tools[name]
    crashed = []

    def handler(context: ToolContext, **arguments: Any) -> Any:
        if crashed:
            return spec.handler(context=context, **arguments)
        crashed.append(True)
        if after_effect:
            spec.handler(context=context, **arguments)
        raise Crash

    changed = dict(tools)
    changed[name] = ToolSpec(spec.description, spec.schema, handler, effectful=True, idempotent=spec.idempotent)
    return changed


def _effects(ledger: Path, tool: str | None = None) -> list[dict[str, Any]]:
    return [e for e in read_ledger(ledger) if e["event"] == "effect" and (tool is None or e["tool"] == tool)]


def _crash(tmp_path: Path, tool: str, *, after_effect: bool, invoices: tuple[str, ...] = ("A",)) -> SqliteStore:
    store = SqliteStore(tmp_path / "runs.db")
    tools = _crashing(ledger_tools(tmp_path / "ledger"), tool, after_effect=after_effect)
    with pytest.raises(Crash):
        run(task_for(list(invoices)), LedgerModel(), tools, gate=pay_gate, store=store, run_id="r1")
    return store


# --- tool contexts and keys ---------------------------------------------------------


def test_a_handler_naming_context_gets_the_runs_id_and_a_stable_key(tmp_path: Path) -> None:
    """The key is the same for the same call at the same place in the run, and differs for any other call."""
    ledger = tmp_path / "ledger"
    result = run(task_for(["A"]), LedgerModel(), ledger_tools(ledger), gate=pay_gate, run_id="run-7")
    [paid, receipt] = _effects(ledger)
    assert paid["run"] == "run-7" and paid["call"] == "c1"
    state = result.state
    state.observations = state.observations[:1]  # the place pay held when it ran
    assert paid["key"] == idempotency_key("run-7", state, ToolCall("c1", "pay", paid["args"]))
    assert paid["key"] != receipt["key"]
    assert idempotency_key("run-8", state, ToolCall("c1", "pay", paid["args"])) != paid["key"]


def test_one_run_id_in_two_databases_gets_two_keys(tmp_path: Path) -> None:
    """Run ``t-1`` stored in two databases (two environments) pays under two keys: a provider never dedups them."""
    keys = []
    for name in ("staging", "production"):
        ledger = tmp_path / f"{name}.ledger"
        run(
            task_for(["A"]),
            LedgerModel(),
            ledger_tools(ledger),
            gate=pay_gate,
            store=SqliteStore(tmp_path / f"{name}.db"),
            run_id="t-1",
        )
        keys.append(_effects(ledger, "pay")[0]["key"])
    assert keys[0] != keys[1]
    reused = tmp_path / "again.ledger"  # the same id reused in memory, without a store: a key of its own too
    run(task_for(["A"]), LedgerModel(), ledger_tools(reused), gate=pay_gate, run_id="t-1")
    assert _effects(reused, "pay")[0]["key"] not in keys


def test_a_saved_state_keeps_its_keys(tmp_path: Path) -> None:
    """The nonce is saved with the state: a state read back keys the same call with the same key."""
    result = run(task_for(["A"]), LedgerModel(), ledger_tools(tmp_path / "ledger"), gate=pay_gate, run_id="r")
    state, call = result.state, ToolCall("c1", "pay", {"invoice": "A"})
    again = type(state).from_json(state.to_json())
    assert again.nonce == state.nonce and len(state.nonce) == 32
    assert idempotency_key("r", again, call) == idempotency_key("r", state, call)


def test_a_state_saved_before_the_nonce_keeps_its_old_keys(tmp_path: Path) -> None:
    """A state saved without a nonce (before it existed) keys its calls as it did then, and is written as it was."""
    result = run(task_for(["A"]), LedgerModel(), ledger_tools(tmp_path / "ledger"), gate=pay_gate, run_id="r")
    text = result.state.to_json().replace(f', "nonce": "{result.state.nonce}"', "")
    old = type(result.state).from_json(text)
    assert old.nonce == "" and old.to_json() == text
    call = ToolCall("c1", "pay", {"invoice": "A"})
    import hashlib

    before = f"r\x00{len(old.observations)}\x00{fingerprint(call)}"
    assert idempotency_key("r", old, call) == hashlib.sha256(before.encode()).hexdigest()[:32]


def test_the_model_cannot_forge_the_context(tmp_path: Path) -> None:
    """An open schema lets the model send ``context``; the handler still gets the engine's ToolContext."""
    got = []
    spec = ToolSpec("Echo.", {"type": "object"}, lambda context, **_: got.append(context) or "ok")
    model = ScriptedModel([tool_call_message("c1", "echo", {"context": "mine"}), answer_message("done")])
    run("go", model, {"echo": spec}, run_id="r")
    assert isinstance(got[0], ToolContext) and got[0].run_id == "r"


def test_the_fingerprint_reads_canonical_arguments() -> None:
    """Key order does not change a fingerprint; the call id and the values do."""
    a = ToolCall("c1", "pay", {"invoice": "A", "cents": 1})
    assert fingerprint(a) == fingerprint(ToolCall("c1", "pay", {"cents": 1, "invoice": "A"}))
    assert fingerprint(a) != fingerprint(ToolCall("c2", "pay", {"invoice": "A", "cents": 1}))
    assert fingerprint(a) != fingerprint(ToolCall("c1", "pay", {"invoice": "A", "cents": 2}))


# --- retries -----------------------------------------------------------------------------


def _flaky(failures: int, *, idempotent: bool = True, retries: int = 3) -> tuple[ToolSpec, list[str]]:
    keys: list[str] = []

    def handler(context: ToolContext) -> str:
        keys.append(context.idempotency_key)
        if len(keys) <= failures:
            raise ToolError("temporarily unavailable")
        return "sent"

    return ToolSpec("Flaky.", {}, handler, idempotent=idempotent, retries=retries, backoff=0.0), keys


def test_an_idempotent_tool_is_retried_under_one_key() -> None:
    """Two failures then success: one ok observation, three attempts counted, every attempt under the same key."""
    spec, keys = _flaky(2)
    model = ScriptedModel([tool_call_message("c1", "send", {}), answer_message("done")])
    result = run("go", model, {"send": spec})
    assert [o.kind for o in result.state.observations] == ["result"]
    assert result.state.tool_attempts == 3 and len(keys) == 3 and len(set(keys)) == 1


def test_retries_spend_the_tool_budget() -> None:
    """With max_tool_calls=2 the third attempt is never made; the failure is what the model sees."""
    spec, keys = _flaky(5)
    model = ScriptedModel([tool_call_message("c1", "send", {}), answer_message("done")])
    result = run("go", model, {"send": spec}, limits=Limits(max_tool_calls=2))
    assert len(keys) == 2 and result.state.tool_attempts == 2
    assert result.state.observations[0].kind == "error"


def test_retries_are_refused_for_a_tool_that_is_not_idempotent() -> None:
    """Retrying a payment could pay twice: the definition is refused and says what to declare."""
    with pytest.raises(ToolDefinitionError, match="idempotent=True"):
        ToolSpec("Pay.", {}, lambda: None, retries=2)
    with pytest.raises(ToolDefinitionError, match="whole number"):
        ToolSpec("Pay.", {}, lambda: None, idempotent=True, retries=-1)


# --- recovery: an effect in flight is never silently run twice --------------------------


@pytest.mark.parametrize("after_effect", [False, True])
def test_an_interrupted_payment_waits_for_a_person(tmp_path: Path, after_effect: bool) -> None:
    """Killed between intent and observation, a non-idempotent call pauses "outcome unknown" and is not re-run."""
    _crash(tmp_path, "pay", after_effect=after_effect)
    ledger = tmp_path / "ledger"
    paid_before = len(_effects(ledger, "pay"))
    [done] = recover(SqliteStore(tmp_path / "runs.db"), ledger_agent(ledger), older_than=0)
    assert done.interrupted == "c1" and done.result is not None
    assert done.result.stop.value == "awaiting_approval"
    assert (done.result.reason or "").startswith(OUTCOME_UNKNOWN)
    assert len(_effects(ledger, "pay")) == paid_before == (1 if after_effect else 0)
    [waiting] = SqliteStore(tmp_path / "runs.db").paused()
    assert waiting.blocked is not None and waiting.blocked.call_id == "c1"
    assert SqliteStore(tmp_path / "runs.db").effects("r1")[0].outcome == "interrupted"


def test_approving_an_unknown_outcome_runs_it_again_under_the_same_key(tmp_path: Path) -> None:
    """The person saw no payment in the ledger and approved: it runs once more, with the key of the lost attempt."""
    _crash(tmp_path, "pay", after_effect=False)
    ledger = tmp_path / "ledger"
    agent = ledger_agent(ledger)
    recover(SqliteStore(tmp_path / "runs.db"), agent, older_than=0)
    [lost] = SqliteStore(tmp_path / "runs.db").effects("r1")
    result = approve(SqliteStore(tmp_path / "runs.db"), "r1", agent, reviewer="ana")
    assert result.stop.value == "answered"
    [paid] = _effects(ledger, "pay")
    assert paid["key"] == lost.idempotency_key


def test_rejecting_an_unknown_outcome_records_it_as_not_run(tmp_path: Path) -> None:
    """The person found the payment already made and rejected: the model is told it was recorded as not run."""
    _crash(tmp_path, "pay", after_effect=True)
    ledger = tmp_path / "ledger"
    agent = ledger_agent(ledger)
    recover(SqliteStore(tmp_path / "runs.db"), agent, older_than=0)
    result = reject(SqliteStore(tmp_path / "runs.db"), "r1", agent, reviewer="bo", reason="paid already")
    assert len(_effects(ledger, "pay")) == 1
    observation = result.state.observations[1]
    assert observation.kind == "denied" and "recorded as not run (paid already)" in str(observation.content)


@pytest.mark.parametrize("after_effect", [False, True])
def test_an_interrupted_idempotent_call_is_run_again_under_the_same_key(tmp_path: Path, after_effect: bool) -> None:
    """A receipt in flight at the crash is sent again by recovery, with the same key; the run then ends."""
    _crash(tmp_path, "send_receipt", after_effect=after_effect)
    ledger = tmp_path / "ledger"
    [done] = recover(SqliteStore(tmp_path / "runs.db"), ledger_agent(ledger), older_than=0)
    assert done.result is not None and done.result.stop.value == "answered"
    receipts = _effects(ledger, "send_receipt")
    assert len(receipts) == (2 if after_effect else 1) and len({r["key"] for r in receipts}) == 1
    assert len(_effects(ledger, "pay")) == 1
    assert [e.outcome for e in SqliteStore(tmp_path / "runs.db").effects("r1")] == ["result", "interrupted", "result"]


def test_an_idempotent_call_the_gate_now_refuses_waits_for_a_person(tmp_path: Path) -> None:
    """Recovery asks the gate again before re-running; a refusal does not turn an unknown outcome into "not run"."""
    _crash(tmp_path, "send_receipt", after_effect=True)
    ledger = tmp_path / "ledger"
    refuse_receipts = lambda call: (call.name != "send_receipt", "receipts are paused today")
    [done] = recover(SqliteStore(tmp_path / "runs.db"), ledger_agent(ledger, gate=refuse_receipts), older_than=0)
    assert done.result is not None and done.result.stop.value == "awaiting_approval"
    assert "receipts are paused today" in (done.result.reason or "")
    assert len(_effects(ledger, "send_receipt")) == 1


def test_a_crash_outside_any_effect_is_continued(tmp_path: Path) -> None:
    """Killed while the model was thinking, the run goes on from its last checkpoint and ends; nothing doubles."""
    store = SqliteStore(tmp_path / "runs.db")
    ledger = tmp_path / "ledger"

    class DyingModel(LedgerModel):
        def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
            if sum(1 for m in messages if m.get("role") == "tool") == 3:
                raise Crash
            return super().chat(messages, tools)

    with pytest.raises(Crash):
        run(task_for(["A", "B"]), DyingModel(), ledger_tools(ledger), gate=pay_gate, store=store, run_id="r1")
    [done] = recover(SqliteStore(tmp_path / "runs.db"), ledger_agent(ledger), older_than=0)
    assert done.interrupted is None and done.result is not None and done.result.stop.value == "answered"
    assert [(e["tool"], e["args"]["invoice"]) for e in _effects(ledger)] == [
        ("pay", "A"),
        ("send_receipt", "A"),
        ("pay", "B"),
        ("send_receipt", "B"),
    ]


def test_a_crash_while_running_an_approved_call_asks_again(tmp_path: Path) -> None:
    """An approved payment killed mid-call is not run again on the old approval: a new pause, a new id."""
    store = SqliteStore(tmp_path / "runs.db")
    ledger = tmp_path / "ledger"
    run(task_for(["BIG-1"]), LedgerModel(), ledger_tools(ledger), gate=pay_gate, store=store, run_id="r1")
    first_pause = store.paused()[0].pause_id
    with pytest.raises(Crash):
        crashing = Agent(LedgerModel(), _crashing(ledger_tools(ledger), "pay", after_effect=True), gate=pay_gate)
        approve(store, "r1", crashing, reviewer="ana")
    [done] = recover(SqliteStore(tmp_path / "runs.db"), ledger_agent(ledger), older_than=0)
    assert done.result is not None and (done.result.reason or "").startswith(OUTCOME_UNKNOWN)
    [waiting] = SqliteStore(tmp_path / "runs.db").paused()
    assert waiting.pause_id not in (None, first_pause)
    assert len(_effects(ledger, "pay")) == 1


def test_recover_without_an_agent_claims_nothing(tmp_path: Path) -> None:
    """A model passed where the agent goes is refused before any claim: the crashed run is left as it was."""
    _crash(tmp_path, "pay", after_effect=False)
    before = SqliteStore(tmp_path / "runs.db").load("r1").summary
    with pytest.raises(TypeError, match="'agent' must be an Agent .*LedgerModel"):
        recover(SqliteStore(tmp_path / "runs.db"), LedgerModel(), older_than=0)  # type: ignore[arg-type]
    after = SqliteStore(tmp_path / "runs.db").load("r1").summary
    assert (after.status, after.owner, after.version) == ("running", before.owner, before.version)


def test_recover_leaves_fresh_runs_to_their_owner(tmp_path: Path) -> None:
    """A run committed a moment ago is not claimed with the default ``older_than``."""
    _crash(tmp_path, "pay", after_effect=False)
    assert recover(SqliteStore(tmp_path / "runs.db"), ledger_agent(tmp_path / "ledger")) == []


def test_a_decision_whose_process_died_opens_the_pause_again_under_a_new_id(tmp_path: Path) -> None:
    """Rejected, then killed before the run moved on: recovery pauses it again, and the old pause id decides nothing."""
    store = SqliteStore(tmp_path / "runs.db")
    ledger = tmp_path / "ledger"
    run(task_for(["BIG-1"]), LedgerModel(), ledger_tools(ledger), gate=pay_gate, store=store, run_id="r1")
    old = store.paused()[0].pause_id

    class DyingModel(LedgerModel):
        def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
            raise Crash

    with pytest.raises(Crash):
        reject(store, "r1", ledger_agent(ledger).replace(model=DyingModel()), reviewer="ana", reason="no")
    assert SqliteStore(tmp_path / "runs.db").load("r1").status == "running"
    [done] = recover(SqliteStore(tmp_path / "runs.db"), ledger_agent(ledger), older_than=0)
    assert done.result is not None and done.result.stop.value == "awaiting_approval"
    [waiting] = SqliteStore(tmp_path / "runs.db").paused()
    assert waiting.pause_id not in (None, old)
    with pytest.raises(AlreadyDecided):
        SqliteStore(tmp_path / "runs.db").decide("r1", old or "", "approve", reviewer="bo")
    assert [d.reviewer for d in store.history("r1")] == ["ana"]
