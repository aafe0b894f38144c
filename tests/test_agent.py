"""The agent as one value: built once, run many times, continued without passing its parts again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agent_fsm
from agent_fsm import (
    Agent,
    Ended,
    Limits,
    RunState,
    ScriptedModel,
    Stop,
    ToolDefinitionError,
    ToolSpec,
    answer_message,
    tool_call_message,
)
from tests.nonces import one_nonce
from tests.payments import make_payments, pay_gate


def _paying(cents: int) -> ScriptedModel:
    return ScriptedModel([tool_call_message("c1", "pay", {"account": "ACME", "cents": cents}), answer_message("paid")])


def test_resume_needs_nothing_passed_again() -> None:
    """A pause decided by the agent that paused it runs the approved payment once, judged by the agent's gate."""
    tools, ledger = make_payments()
    agent = Agent(_paying(50), tools, gate=pay_gate, name="payments")
    paused = agent.run("pay 50")
    assert paused.stop is Stop.AWAITING_APPROVAL
    assert ledger == []
    done = agent.resume(RunState.from_json(paused.state.to_json()), approve=True)
    assert done.stop is Stop.ANSWERED
    assert [entry["cents"] for entry in ledger] == [50]


@one_nonce()
def test_module_level_functions_delegate_to_the_agent() -> None:
    """``run(task, model, tools, ...)`` ends exactly as ``Agent(model, tools, ...).run(task)`` does."""
    results = []
    for how in ("function", "agent"):
        tools, ledger = make_payments()
        if how == "function":
            result = agent_fsm.run("pay 10", _paying(10), tools, gate=pay_gate, run_id="r")
        else:
            result = Agent(_paying(10), tools, gate=pay_gate).run("pay 10", run_id="r")
        results.append((result.stop, result.answer, result.state.to_json(), [e["cents"] for e in ledger]))
    assert results[0] == results[1]
    assert results[0][3] == [10]


def test_an_agent_without_a_gate_refuses_effects() -> None:
    """The secure default holds on the value as on the function: no gate, no payment."""
    tools, ledger = make_payments()
    result = Agent(_paying(10), tools, limits=Limits(max_turns=2)).run("pay 10")
    assert ledger == []
    assert result.state.observations[0].kind == "denied"


def test_replace_derives_a_variant_and_leaves_the_original() -> None:
    """``replace`` returns a new agent; the original keeps its parts."""
    tools, _ = make_payments()
    agent = Agent(_paying(10), tools, gate=pay_gate)
    strict = agent.replace(limits=Limits(max_turns=1))
    assert strict.limits == Limits(max_turns=1)
    assert agent.limits is None
    assert strict.gate is agent.gate
    with pytest.raises(attrs_frozen_error()):
        agent.gate = None  # type: ignore[misc]


def attrs_frozen_error() -> type[BaseException]:
    import attrs

    return attrs.exceptions.FrozenInstanceError


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model": object()}, "'model' must be a model with a chat()"),
        ({"tools": [1, 2]}, "tools must be a mapping"),
        ({"gate": "allow"}, "'gate' must be callable"),
        ({"limits": {"max_turns": 3}}, "'limits' must be"),
        ({"name": ""}, "'name' must be a non-empty str"),
        ({"answer_check": 3}, "'answer_check' must be callable"),
    ],
)
def test_a_bad_part_is_refused_when_the_agent_is_built(changes: dict[str, Any], message: str) -> None:
    """Misuse fails at definition time with a message naming the part, not at the first run."""
    tools, _ = make_payments()
    parts: dict[str, Any] = {"model": _paying(1), "tools": tools, **changes}
    with pytest.raises(TypeError, match=message):
        Agent(parts.pop("model"), parts.pop("tools"), **parts)


def test_a_bad_tool_name_is_refused_when_the_agent_is_built() -> None:
    """A registry the engine could not use is refused up front."""
    spec = ToolSpec("Read.", {"x": int}, lambda x: x)
    with pytest.raises(ToolDefinitionError):
        Agent(_paying(1), {"not a name!": spec})


def test_digest_follows_the_tool_contracts() -> None:
    """Equal contracts give equal digests; a changed schema, flag or description changes it; the model does not."""
    tools, _ = make_payments()
    again, _ = make_payments()
    wider, _ = make_payments(maximum=5000)
    base = Agent(_paying(1), tools)
    assert base.digest == Agent(_paying(2), again).digest
    assert base.digest != Agent(_paying(1), wider).digest
    loud = dict(tools)
    loud["balance"] = ToolSpec("Read a balance.", {"account": str}, lambda account: 1, effectful=True)
    assert base.digest != Agent(_paying(1), loud).digest


def test_stream_ends_with_the_result_run_gives() -> None:
    """``agent.stream`` yields events and ends with Ended carrying the same ending as ``agent.run``."""
    tools, _ = make_payments()
    events = list(Agent(_paying(10), tools, gate=pay_gate).stream("pay 10"))
    assert isinstance(events[-1], Ended)
    assert events[-1].result.stop is Stop.ANSWERED


@one_nonce()
def test_async_twins_rest_where_the_sync_ones_do() -> None:
    """``arun``/``aresume`` on the agent pause and finish exactly as ``run``/``resume``."""
    tools, ledger = make_payments()
    agent = Agent(_paying(50), tools, gate=pay_gate)

    async def main() -> tuple[Any, str, Any]:
        paused = await agent.arun("pay 50", run_id="a")
        saved = paused.state.to_json()
        done = await agent.aresume(paused.state, approve=True)
        return paused, saved, done

    paused, saved, done = asyncio.run(main())
    assert paused.stop is Stop.AWAITING_APPROVAL
    assert done.stop is Stop.ANSWERED
    assert [entry["cents"] for entry in ledger] == [50]
    sync_tools, _ = make_payments()
    sync_paused = Agent(_paying(50), sync_tools, gate=pay_gate).run("pay 50", run_id="a")
    assert sync_paused.state.to_json() == saved


def test_a_run_records_its_agent_and_its_contracts() -> None:
    """The state names the agent that ran it and the digest of its tool contracts; both survive a save."""
    tools, _ = make_payments()
    agent = Agent(_paying(50), tools, gate=pay_gate, name="payments")
    state = agent.run("pay 50").state
    assert (state.agent, state.agent_digest) == ("payments", agent.digest)
    loaded = RunState.from_json(state.to_json())
    assert (loaded.agent, loaded.agent_digest) == ("payments", agent.digest)


def test_a_state_saved_before_the_agent_was_recorded_still_loads() -> None:
    """Saved states written without the agent fields load, with both unset; a wrong type there is refused."""
    import json

    tools, _ = make_payments()
    data = json.loads(Agent(_paying(50), tools, gate=pay_gate).run("pay 50").state.to_json())
    del data["agent"], data["agent_digest"], data["elapsed"]
    loaded = RunState.from_json(json.dumps(data))
    assert (loaded.agent, loaded.agent_digest) == (None, None)
    data["agent"] = 7
    with pytest.raises(ValueError, match="agent"):
        RunState.from_json(json.dumps(data))


def test_the_digest_is_computed_once_per_agent() -> None:
    """An agent computes its digest once (every run records it); equal to the registry's contract digest."""
    from agent_fsm.engine import contract_digest

    tools, _ = make_payments()
    agent = Agent(_paying(1), tools)
    first = agent.digest
    assert agent.digest is first
    assert first == contract_digest(tools)
