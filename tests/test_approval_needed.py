"""A tool that asks for approval from inside: raise ApprovalNeeded before the effect, and the run pauses on the call."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent_fsm import (
    Agent,
    ApprovalNeeded,
    Paused,
    RunEvent,
    RunState,
    ScriptedModel,
    StateEntered,
    Stop,
    ToolCall,
    ToolContext,
    ToolSpec,
    allow_all,
    answer_message,
    attempt,
    tool_call_message,
)
from agent_fsm.store import SqliteStore, approve, reject
from tests.nonces import one_nonce

TRANSFER = {"to": str, "cents": int}


class Bank:
    """Moves money itself up to 100 cents; above that it asks a person first (and says so)."""

    def __init__(self) -> None:
        self.moved: list[int] = []
        self.asked: list[bool] = []

    def transfer(self, to: str, cents: int, context: ToolContext) -> str:
        self.asked.append(context.approved)
        if cents > 100 and not context.approved:
            raise ApprovalNeeded(f"moving {cents} cents to {to} needs a person's approval")
        self.moved.append(cents)
        return f"moved {cents} to {to}"


def _agent(bank: Bank, cents: int = 500) -> Agent:
    model = ScriptedModel([tool_call_message("c1", "transfer", {"to": "bob", "cents": cents}), answer_message("done")])
    tools = {"transfer": ToolSpec("Move money.", TRANSFER, bank.transfer, effectful=True)}
    return Agent(model, tools, gate=allow_all, name="bank")


def test_the_run_pauses_on_the_call_as_if_the_gate_had_asked() -> None:
    """The handler asked before its effect: awaiting_approval, blocked on the call, the tool's reason, no effect."""
    bank = Bank()
    events: list[RunEvent] = []
    result = _agent(bank).run("pay bob", on_event=events.append)
    assert result.stop is Stop.AWAITING_APPROVAL
    assert result.blocked_on is not None and result.blocked_on.call_id == "c1"
    assert result.reason == "moving 500 cents to bob needs a person's approval"
    assert bank.moved == [] and bank.asked == [False]
    assert result.state.observations == [] and result.state.pause is not None
    [paused] = [e for e in events if isinstance(e, Paused)]
    assert paused.pause_id == result.state.pause_id and paused.reason == result.reason
    entered = [(e.source, e.state) for e in events if isinstance(e, StateEntered)]
    assert entered[-1] == ("Executing", "AwaitingApproval")


def test_approved_the_handler_runs_again_knowing_it() -> None:
    """On approval the handler is called again with context.approved true, and goes ahead."""
    bank = Bank()
    agent = _agent(bank)
    paused = agent.run("pay bob")
    done = agent.resume(RunState.from_json(paused.state.to_json()), approve=True)
    assert done.stop is Stop.ANSWERED
    assert bank.asked == [False, True] and bank.moved == [500]
    assert [o.kind for o in done.state.observations] == ["result"]


def test_rejected_the_model_reads_that_a_person_refused() -> None:
    """A rejection is a denied observation; the handler is not called again."""
    bank = Bank()
    agent = _agent(bank)
    done = agent.resume(agent.run("pay bob").state, approve=False, reason="not today")
    assert done.stop is Stop.ANSWERED and bank.moved == [] and bank.asked == [False]
    assert done.state.observations[0].kind == "denied" and "not today" in done.state.observations[0].content


def test_below_the_threshold_nothing_is_asked() -> None:
    """A handler that does not raise runs as always; context.approved is false."""
    bank = Bank()
    result = _agent(bank, cents=50).run("pay bob")
    assert result.stop is Stop.ANSWERED and bank.moved == [50] and bank.asked == [False]


def test_the_pause_is_saved_and_decided_through_a_sqlite_store(tmp_path: Path) -> None:
    """Paused in one store object, approved from another (another process's view): the effect happens once."""
    bank = Bank()
    agent = _agent(bank)
    path = tmp_path / "runs.db"
    agent.run("pay bob", store=SqliteStore(path), run_id="t1")
    [waiting] = SqliteStore(path).paused()
    assert waiting.run_id == "t1" and waiting.reason == "moving 500 cents to bob needs a person's approval"
    assert waiting.blocked is not None and waiting.blocked.arguments == {"to": "bob", "cents": 500}
    assert bank.moved == []
    result = approve(SqliteStore(path), "t1", agent, reviewer="ana")
    assert result.stop is Stop.ANSWERED and bank.moved == [500] and bank.asked == [False, True]
    stored = SqliteStore(path).load("t1")
    assert stored.status == "ended" and stored.state == result.state
    [decision] = SqliteStore(path).history("t1")
    assert (decision.decision, decision.reviewer) == ("approve", "ana")


def test_a_rejection_through_the_store_records_it_not_run(tmp_path: Path) -> None:
    """Rejected from the inbox: the tool never moved money, the model reads the reason."""
    bank = Bank()
    agent = _agent(bank)
    path = tmp_path / "runs.db"
    agent.run("pay bob", store=SqliteStore(path), run_id="t2")
    result = reject(SqliteStore(path), "t2", agent, reviewer="bo", reason="too much")
    assert bank.moved == [] and result.state.observations[0].kind == "denied"


@one_nonce()
def test_the_async_driver_pauses_the_same_way() -> None:
    """arun rests exactly where run rests."""
    sync = _agent(Bank()).run("pay bob", run_id="r").state.to_json()
    assert asyncio.run(_agent(Bank()).arun("pay bob", run_id="r")).state.to_json() == sync


def test_attempt_outside_a_run_refuses_the_call() -> None:
    """attempt() has no pause to offer: the call is denied with the tool's reason."""
    bank = Bank()
    tools = {"transfer": ToolSpec("Move money.", TRANSFER, bank.transfer, effectful=True)}
    call = ToolCall("c1", "transfer", {"to": "bob", "cents": 500}, '{"to": "bob", "cents": 500}')
    observation = attempt(call, tools, allow_all)
    assert observation.kind == "denied" and "needs a person's approval" in str(observation.content)
    assert bank.moved == []


def test_a_reason_that_is_not_text_is_a_handler_error_not_an_unreadable_pause() -> None:
    """raise ApprovalNeeded(5): checked as a gate's reason is, a HandlerError with the state; no pause is made."""
    import pytest

    from agent_fsm import HandlerError

    def transfer(to: str, cents: int) -> str:
        raise ApprovalNeeded(5)  # type: ignore[arg-type]

    model = ScriptedModel([tool_call_message("c1", "transfer", {"to": "bob", "cents": 5}), answer_message("done")])
    tools = {"transfer": ToolSpec("Move money.", TRANSFER, transfer, effectful=True)}
    with pytest.raises(HandlerError, match="reason") as caught:
        Agent(model, tools, gate=allow_all).run("pay bob")
    state = caught.value.state
    assert state is not None and state.pause is None and state.machine_state != "AwaitingApproval"
    assert RunState.from_json(state.to_json()) == state


def test_the_pause_spends_no_tool_attempt_so_a_budget_of_one_still_runs_the_approved_call() -> None:
    """Asking is not an attempt: with max_tool_calls=1 the approved call runs, and attempts match observations."""
    from agent_fsm import Limits

    bank = Bank()
    model = ScriptedModel([tool_call_message("c1", "transfer", {"to": "bob", "cents": 500}), answer_message("done")])
    tools = {"transfer": ToolSpec("Move money.", TRANSFER, bank.transfer, effectful=True)}
    agent = Agent(model, tools, gate=allow_all, limits=Limits(max_tool_calls=1))
    paused = agent.run("pay bob")
    assert paused.state.tool_attempts == 0
    done = agent.resume(paused.state, approve=True)
    assert bank.moved == [500] and done.state.observations[0].kind == "result"
    assert done.state.tool_attempts == 1
