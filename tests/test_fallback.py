"""FallbackModel: a listed provider failure asks the next model, each attempt charged to the budgets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import pytest

from agent_fsm import (
    Agent,
    FallbackModel,
    FellBack,
    Limits,
    ModelReply,
    Price,
    Prices,
    ProviderFailure,
    RunEvent,
    RunState,
    ScriptedModel,
    StateEntered,
    Stop,
    answer_message,
)
from tests.nonces import one_nonce


class Down:
    """A provider that fails every call with ``kind`` (and counts the calls)."""

    def __init__(self, kind: str = "http", model: str = "primary") -> None:
        self.kind = kind
        self.model = model
        self.calls = 0

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        self.calls += 1
        raise ProviderFailure(f"{self.model} is down", kind=self.kind, status=503)


class Named(ScriptedModel):
    """A scripted model that goes by a name (which picks its price)."""

    def __init__(self, name: str, text: str) -> None:
        super().__init__([answer_message(text)])
        self.model = name

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        return ModelReply(super().chat(messages, tools), prompt_tokens=None, output_tokens=5)


def test_a_listed_failure_asks_the_backup() -> None:
    """The primary fails (http): the backup answers; both attempts are turns, the edge and event say so."""
    primary = Down()
    events: list[RunEvent] = []
    result = Agent(FallbackModel(primary, Named("backup", "from the backup")), {}).run("hi", on_event=events.append)
    assert result.stop is Stop.ANSWERED and result.answer == "from the backup"
    assert primary.calls == 1 and result.state.turns == 2
    assert result.state.path == ["Proposing", "Proposing", "Answered"]
    [fell] = [e for e in events if isinstance(e, FellBack)]
    assert (fell.attempt, fell.kind, fell.turn) == (0, "http", 1) and "primary is down" in fell.message
    assert [e.guard for e in events if isinstance(e, StateEntered)][1] == "can_fall_back"
    assert result.state.model_attempt == 0  # a reply sets the next turn back on the primary
    assert result.state.fault is None


def test_an_unlisted_failure_ends_provider_error() -> None:
    """A failure kind the chain does not list is not retried elsewhere."""
    backup = Named("backup", "never")
    result = Agent(FallbackModel(Down("request_limit"), backup, on={"http"}), {}).run("hi")
    assert result.stop is Stop.PROVIDER_ERROR and result.state.turns == 1


def test_provider_error_only_when_every_model_failed() -> None:
    """Three models down: three attempts, then provider_error with the last failure."""
    chain = [Down(model=f"m{i}") for i in range(3)]
    result = Agent(FallbackModel(*chain), {}).run("hi")
    assert result.stop is Stop.PROVIDER_ERROR
    assert [m.calls for m in chain] == [1, 1, 1] and result.state.turns == 3
    assert result.reason is not None and "m2 is down" in result.reason


def test_each_attempt_spends_a_turn() -> None:
    """With one turn left the backup is not asked: the turn budget holds across the chain."""
    backup = Named("backup", "never")
    result = Agent(FallbackModel(Down(), backup), {}, limits=Limits(max_turns=1)).run("hi")
    assert result.stop is Stop.PROVIDER_ERROR and result.state.turns == 1


def test_a_backup_the_cost_budget_cannot_afford_is_not_asked() -> None:
    """The backup's worst case would pass max_cost: the run ends without asking it, the budget intact."""
    prices = Prices(
        {
            "primary": Price(Decimal("1"), Decimal("1")),
            "backup": Price(Decimal("100000"), Decimal("100000")),
        }
    )
    limits = Limits(max_output_tokens=100, max_cost=Decimal("1"))
    agent = Agent(FallbackModel(Down(), Named("backup", "pricey")), {}, limits=limits, prices=prices)
    result = agent.run("hi")
    assert result.stop is Stop.PROVIDER_ERROR and result.state.turns == 1
    assert result.usage.cost == 0


def test_the_answering_model_is_the_one_charged() -> None:
    """The backup's reply is priced at the backup's price."""
    prices = Prices({"primary": Price(Decimal("1"), Decimal("1")), "backup": Price(Decimal("0"), Decimal("2"))})
    result = Agent(FallbackModel(Down(), Named("backup", "ok")), {}, prices=prices).run("hi")
    assert result.usage.cost == Decimal(10) / 1_000_000  # 5 output tokens at 2 per million; the prompt is free


@one_nonce()
def test_the_async_driver_falls_back_the_same_way() -> None:
    """arun takes the same edge and rests in the same state."""
    agent = Agent(FallbackModel(Down(), Named("backup", "ok")), {})
    sync = agent.run("hi", run_id="r").state.to_json()
    other = Agent(FallbackModel(Down(), Named("backup", "ok")), {})
    assert asyncio.run(other.arun("hi", run_id="r")).state.to_json() == sync


def test_a_chain_used_directly_tries_each_model() -> None:
    """Outside a run, chat() returns the first reply of the chain, or raises the last failure."""
    chain = FallbackModel(Down(), ScriptedModel([answer_message("second")]))
    assert chain.chat([{"role": "user", "content": "hi"}])["content"] == "second"
    with pytest.raises(ProviderFailure, match="b is down"):
        FallbackModel(Down(model="a"), Down(model="b")).chat([])
    with pytest.raises(ProviderFailure, match="a is down"):
        FallbackModel(Down("request_limit", "a"), Down(model="b"), on={"http"}).chat([])


def test_a_chain_is_checked_when_built() -> None:
    """One model, a model without chat, or kinds given as one string are refused."""
    with pytest.raises(TypeError, match="at least one backup"):
        FallbackModel(Down())
    with pytest.raises(TypeError, match="chat"):
        FallbackModel(Down(), object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'on'"):
        FallbackModel(Down(), Down(), on="http")


def test_the_position_in_the_chain_is_saved_and_a_forged_one_cannot_crash() -> None:
    """model_attempt is saved; a forged position past the chain is clamped to its last model."""
    state = Agent(FallbackModel(Down(), Named("b", "ok")), {}).run("hi").state
    data = json.loads(state.to_json())
    assert data["model_attempt"] == 0
    fresh = json.loads(RunState().to_json())
    fresh["model_attempt"] = 99
    loaded = RunState.from_json(json.dumps(fresh))
    loaded.messages.append({"role": "user", "content": "hi"})
    loaded.message_tokens = 5
    result = Agent(FallbackModel(Down(), Named("b", "last")), {}).advance(loaded)
    assert result.answer == "last"
