"""One machine, two drivers: the same scripts through run/resume and arun/aresume give identical results."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import Ended, RunResult, RunState, Stop, aresume, arun, check_run, resume, run
from agent_fsm.examples.support_desk import make_support_desk
from agent_fsm.testing import assert_run_invariants, gates, limits, scripted_models, world_of
from tests.async_worlds import AsyncModel, async_gate, async_tools
from tests.nonces import one_nonce
from tests.strategies import make_ledger

WORLDS: dict[str, Callable[[], Any]] = {"support_desk": make_support_desk, "ledger": make_ledger}
REGISTRIES = {name: world_of(make()).tools for name, make in WORLDS.items()}
MODELS = {name: scripted_models(tools) for name, tools in REGISTRIES.items()}
GATES = {name: gates(tools) for name, tools in REGISTRIES.items()}
LIMITS = limits()


def _sync(
    world: str, model: Any, gate: Any, chosen: Any, decisions: list[bool], heard: list[Any] | None = None
) -> tuple[list[RunResult], Any]:
    # Heard by a listener, the run's requests go through the driver (events are delivered between them);
    # unheard, the sync driver performs them where they are made. Both must come to the same rest.
    made = world_of(WORLDS[world]())
    listen = None if heard is None else heard.append
    results = [run("task", model, made.tools, gate=gate, limits=chosen, run_id="r", on_event=listen)]
    for approve in decisions:
        if results[-1].stop is not Stop.AWAITING_APPROVAL:
            break
        state = results[-1].state
        results.append(resume(state, model, made.tools, approve=approve, gate=gate, limits=chosen, on_event=listen))
    return results, made


async def _async(world: str, model: Any, gate: Any, chosen: Any, decisions: list[bool]) -> tuple[list[RunResult], Any]:
    made = world_of(WORLDS[world]())
    tools = async_tools(made.tools)
    results = [await arun("task", model, tools, gate=gate, limits=chosen, run_id="r")]
    for approve in decisions:
        if results[-1].stop is not Stop.AWAITING_APPROVAL:
            break
        results.append(await aresume(results[-1].state, model, tools, approve=approve, gate=gate, limits=chosen))
    return results, made


@one_nonce()
@pytest.mark.parametrize("world", sorted(WORLDS))
@given(data=st.data())
def test_sync_and_async_drivers_agree_exactly(world: str, data: st.DataObject) -> None:
    """Random scripts, gates, limits and decisions: an all-async world under arun/aresume rests exactly where the
    plain world under run/resume does, state for state (transcript, path, counters, saved JSON) and effect for
    effect, and holds the same invariants; so does the plain world heard by a listener."""
    model = data.draw(MODELS[world], label="model")
    gate = data.draw(GATES[world], label="gate")
    chosen = data.draw(LIMITS, label="limits")
    decisions = data.draw(st.lists(st.booleans(), max_size=4), label="decisions")
    expected, sync_world = _sync(world, model, gate, chosen, decisions)
    heard: list[Any] = []
    listened, listened_world = _sync(world, model, gate, chosen, decisions, heard)
    assert [r.state.to_json() for r in listened] == [r.state.to_json() for r in expected]
    assert listened_world.effects == sync_world.effects
    assert [e.result.stop for e in heard if isinstance(e, Ended)] == [r.stop for r in expected]
    got, async_world = asyncio.run(_async(world, AsyncModel(model), async_gate(gate), chosen, decisions))
    assert [(r.stop, r.code, r.answer, r.reason) for r in got] == [
        (r.stop, r.code, r.answer, r.reason) for r in expected
    ]
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.state.to_json() == theirs.state.to_json()
        assert mine.blocked_on == theirs.blocked_on
    assert async_world.effects == sync_world.effects
    final = got[-1]
    assert all(check_run(final, async_world.effects, chosen).values())
    if final.stop is not Stop.AWAITING_APPROVAL:
        approved = [r.blocked_on.call_id for r, yes in zip(got, decisions, strict=False) if yes and r.blocked_on]
        assert_run_invariants(final, async_world.effects, chosen, tools=async_world.tools, gate=gate, approved=approved)
    assert RunState.from_json(final.state.to_json()) == final.state
