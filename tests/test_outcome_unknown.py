"""An effect that may have happened (a handler timed out after acting) is never guessed: a person decides."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import attrs
import pytest

from agent_fsm import (
    Agent,
    OutcomeUnknown,
    RunState,
    ScriptedModel,
    Stop,
    ToolCall,
    ToolContext,
    ToolSpec,
    allow_all,
    answer_message,
    execute,
    tool_call_message,
)

PAY = {
    "type": "object",
    "properties": {"cents": {"type": "integer"}},
    "required": ["cents"],
    "additionalProperties": False,
}


class Bank:
    """Pays, then (while ``failures`` last) raises as a connection that timed out after the payment went through."""

    def __init__(self, failures: int, error: type[Exception] = TimeoutError) -> None:
        self.failures = failures
        self.error = error
        self.paid: list[int] = []
        self.keys: list[str] = []

    def pay(self, cents: int, context: ToolContext) -> str:
        self.keys.append(context.idempotency_key)
        self.paid.append(cents)
        if self.failures:
            self.failures -= 1
            raise self.error("the bank did not answer in time")
        return f"paid {cents}"


def _agent(bank: Bank, **spec: Any) -> Agent:
    model = ScriptedModel([tool_call_message("c1", "pay", {"cents": 40}), answer_message("done")])
    tools = {"pay": ToolSpec("Pay. Moves money.", PAY, bank.pay, effectful=True, **spec)}
    return Agent(model, tools, gate=allow_all, name="bank")


@pytest.mark.parametrize("error", [TimeoutError, OutcomeUnknown])
def test_a_timed_out_payment_pauses_for_a_person_instead_of_being_proposed_again(error: type[Exception]) -> None:
    """The handler paid and then timed out: the run pauses (outcome unknown), nothing records it as failed."""
    bank = Bank(failures=1, error=error)
    result = _agent(bank).run("pay 40")
    assert result.stop is Stop.AWAITING_APPROVAL
    assert result.reason is not None and result.reason.startswith("outcome unknown: pay (c1) raised")
    assert bank.paid == [40]  # once: the model was not asked again
    assert result.state.observations == []  # neither a result nor an error was invented
    assert result.blocked_on is not None and result.blocked_on.call_id == "c1"
    assert result.state.turns == 1


def test_approving_runs_it_again_under_the_same_key_and_rejecting_records_it_not_run() -> None:
    """A person who finds it did not happen approves (same idempotency key); one who finds it did, rejects."""
    bank = Bank(failures=1)
    agent = _agent(bank)
    paused = agent.run("pay 40")
    saved = paused.state.to_json()
    done = agent.resume(RunState.from_json(saved), approve=True)
    assert done.stop is Stop.ANSWERED
    assert bank.paid == [40, 40] and bank.keys[0] == bank.keys[1]
    other = Bank(failures=1)
    rejected = _agent(other).resume(RunState.from_json(saved), approve=False, reason="it went through")
    assert rejected.stop is Stop.ANSWERED
    assert other.paid == []
    assert rejected.state.observations[0].kind == "denied"


def test_an_idempotent_tool_is_tried_again_under_its_key_within_its_retries() -> None:
    """An idempotent payment that timed out once is retried with the same key, and the run goes on."""
    bank = Bank(failures=1)
    result = _agent(bank, idempotent=True, retries=2, backoff=0.0).run("pay 40")
    assert result.stop is Stop.ANSWERED
    assert bank.paid == [40, 40] and len(set(bank.keys)) == 1
    assert result.state.tool_attempts == 2


def test_an_idempotent_tool_that_never_answers_pauses_when_its_retries_are_spent() -> None:
    """Retries spent and still unknown: a person decides, as for any effect that may have happened."""
    bank = Bank(failures=5)
    result = _agent(bank, idempotent=True, retries=2, backoff=0.0).run("pay 40")
    assert result.stop is Stop.AWAITING_APPROVAL
    assert len(bank.paid) == 3 and result.state.tool_attempts == 3


def test_a_read_that_times_out_is_an_ordinary_error() -> None:
    """An effect-free tool's timeout changes nothing in the world: the model reads an error and goes on."""

    def slow(account: str) -> int:
        raise TimeoutError("no answer")

    model = ScriptedModel([tool_call_message("c1", "balance", {"account": "a"}), answer_message("unknown")])
    result = Agent(model, {"balance": ToolSpec("Read.", {"account": str}, slow)}).run("balance?")
    assert result.stop is Stop.ANSWERED
    assert result.state.observations[0].kind == "error"


def test_the_async_driver_pauses_the_same_way() -> None:
    """arun rests exactly where run rests (each run its own nonce, so its own idempotency key)."""
    sync_state = _agent(Bank(failures=1)).run("pay 40", run_id="r").state
    async_state = asyncio.run(_agent(Bank(failures=1)).arun("pay 40", run_id="r")).state
    assert async_state.nonce != sync_state.nonce

    def keyless(state: RunState) -> str:
        return re.sub(r"idempotency key [0-9a-f]{32}", "KEY", attrs.evolve(state, nonce="").to_json())

    assert keyless(async_state) == keyless(sync_state)


def test_execute_outside_a_run_says_the_outcome_is_unknown() -> None:
    """Code that calls the boundary directly (the patterns) has no pause to offer: the observation says it."""
    bank = Bank(failures=1)
    tools = {"pay": ToolSpec("Pay. Moves money.", PAY, bank.pay, effectful=True)}
    observation = execute(ToolCall("c1", "pay", {"cents": 5}), tools)
    assert observation.kind == "error"
    assert isinstance(observation.content, str) and observation.content.startswith("outcome unknown: ")
