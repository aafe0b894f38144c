"""An approval no gate could carry out is refused out loud, and an agent whose effects no gate allows says so."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from agent_fsm import (
    Agent,
    ScriptedModel,
    Stop,
    ToolSpec,
    UngatedApproval,
    UngatedEffects,
    Verdict,
    answer_message,
    deny_effects,
    resume,
    run,
    tool_call_message,
)
from agent_fsm.engine import DecisionRefused
from agent_fsm.store import SqliteStore, approve, reject
from tests.payments import SCRIPT, make_payments, paused, pay_gate


def test_approving_without_a_gate_raises_before_anything_runs():
    """resume(approve=True) with no gate: the default gate would refuse the payment, so it raises; nothing is paid."""
    result, tools, ledger = paused(cents=50)
    with pytest.raises(UngatedApproval, match=r"'pay'.*gate=") as caught:
        resume(result.state, ScriptedModel(SCRIPT), tools, approve=True)
    assert isinstance(caught.value, DecisionRefused) and caught.value.state is result.state
    assert ledger == [] and not result.state.consumed  # the pause is still open
    done = resume(result.state, ScriptedModel(SCRIPT), tools, approve=True, gate=pay_gate)
    assert done.stop is Stop.ANSWERED and [p["cents"] for p in ledger] == [50]


def test_agent_resume_without_a_gate_raises_and_a_rejection_still_works():
    """Agent.resume(approve=True) refuses the same way; approve=False needs no gate and is taken."""
    result, tools, ledger = paused(cents=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UngatedEffects)
        agent = Agent(ScriptedModel(SCRIPT), tools)
    with pytest.raises(UngatedApproval):
        agent.resume(result.state, approve=True)
    done = agent.resume(result.state, approve=False, reason="not today")
    assert done.stop is Stop.ANSWERED and ledger == []
    assert done.state.observations[0].kind == "denied"


def test_the_store_refuses_an_ungated_approval_before_recording_a_decision(tmp_path):
    """store.approve with an agent with no gate raises and decides nothing: the run stays paused, approvable later."""
    tools, ledger = make_payments()
    store = SqliteStore(tmp_path / "runs.db")
    run("Pay ACME.", ScriptedModel(SCRIPT), tools, gate=pay_gate, store=store, run_id="r1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UngatedEffects)
        ungated = Agent(ScriptedModel(SCRIPT), tools)
    with pytest.raises(UngatedApproval):
        approve(store, "r1", ungated, reviewer="ana")
    assert store.load("r1").status == "paused" and store.history("r1") == [] and ledger == []
    done = approve(store, "r1", Agent(ScriptedModel(SCRIPT), tools, gate=pay_gate), reviewer="ana")
    assert done.stop is Stop.ANSWERED and len(ledger) == 1


def test_a_rejection_from_the_store_needs_no_gate(tmp_path):
    """Only approvals are refused: a rejection with an agent with no gate is recorded and the run goes on."""
    tools, ledger = make_payments()
    store = SqliteStore(tmp_path / "runs.db")
    run("Pay ACME.", ScriptedModel(SCRIPT), tools, gate=pay_gate, store=store, run_id="r1")
    done = reject(
        store, "r1", Agent(ScriptedModel(SCRIPT), tools, gate=deny_effects(tools)), reviewer="bo", reason="no"
    )
    assert done.stop is Stop.ANSWERED and ledger == []


def test_an_agent_whose_effects_no_gate_allows_warns_when_built():
    """Effectful tools and no gate: a warning naming them when the agent is built (and when run() builds one)."""
    tools, _ = make_payments()
    with pytest.warns(UngatedEffects, match=r"\['pay'\].*deny_effects"):
        Agent(ScriptedModel(SCRIPT), tools)
    with pytest.warns(UngatedEffects):
        run("Pay ACME.", ScriptedModel([answer_message("no")]), tools)


def test_an_explicit_gate_or_effect_free_tools_build_in_silence():
    """gate=deny_effects(tools) says the refusal is meant; an agent with only reads has nothing to warn about."""
    tools, _ = make_payments()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Agent(ScriptedModel(SCRIPT), tools, gate=deny_effects(tools))
        Agent(ScriptedModel(SCRIPT), {"balance": tools["balance"]})
        reads = {"balance": ToolSpec("Read.", {"account": str}, lambda account: 1)}
        run("t", ScriptedModel([answer_message("ok")]), reads)


def test_a_nested_pause_approved_where_the_nested_agent_has_no_gate_raises_at_the_top():
    """The approval goes down to the nested call; an agent there with no gate could not run it: refused up front."""
    from tests.test_nesting import child_agent, delegate, parent_of

    log: list[dict[str, Any]] = []
    script = [tool_call_message("w", "write", {"n": 1}), answer_message("wrote one")]
    child = child_agent(log, script, gate=lambda call: Verdict.ask("a person decides"))
    parent = parent_of(child, [delegate(), answer_message("done")])
    paused = parent.run("task")
    assert paused.stop is Stop.AWAITING_APPROVAL and paused.blocked_path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UngatedEffects)
        careless = parent.replace(tools={"child": child.replace(gate=None).as_tool()})
    with pytest.raises(UngatedApproval, match="'write'"):
        careless.resume(paused.state, approve=True)
    assert log == [] and not paused.state.consumed
    assert parent.resume(paused.state, approve=True).stop is Stop.ANSWERED and len(log) == 1


def test_the_warning_points_at_the_callers_line_whichever_way_the_agent_is_built():
    """Agent(...), run(...) and run(..., tool_rules=...) all warn at the line that built the agent, here."""
    from agent_fsm import ends_run

    tools, _ = make_payments()
    for build in (
        lambda: Agent(ScriptedModel(SCRIPT), tools),
        lambda: run("t", ScriptedModel([answer_message("no")]), tools),
        lambda: run("t", ScriptedModel([answer_message("no")]), tools, tool_rules=[ends_run("pay")]),
    ):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UngatedEffects)
            build()
        [warned] = [w for w in caught if w.category is UngatedEffects]
        assert warned.filename == __file__


def test_the_web_inbox_says_an_ungated_approval_cannot_be_taken(tmp_path):
    """The inbox's decision with an agent that has no gate: a 422 saying so, nothing decided, the run still paused."""
    from agent_fsm.web.decisions import FormRefused, Request, apply

    tools, ledger = make_payments()
    path = tmp_path / "runs.db"
    paused = run("Pay ACME.", ScriptedModel(SCRIPT), tools, gate=pay_gate, store=SqliteStore(path), run_id="r1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UngatedEffects)
        ungated = Agent(ScriptedModel(SCRIPT), tools)
    request = Request("r1", paused.state.pause_id, "approve")
    with pytest.raises(FormRefused) as refused:
        apply(request, reviewer="ana", open_store=lambda: SqliteStore(path), agent=ungated)
    assert refused.value.status == 422 and refused.value.title == "This call cannot be approved here"
    assert SqliteStore(path).load("r1").status == "paused" and ledger == []
