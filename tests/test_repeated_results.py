"""Repeated allowed calls: the same call returning the same result Limits.repeated_results times ends no_progress."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given

from agent_fsm import (
    Agent,
    Limits,
    RunState,
    ScriptedModel,
    Stop,
    ToolSpec,
    Verdict,
    allow_all,
    answer_message,
    tool_call_message,
)
from agent_fsm.engine._spending import REPEATED_RESULT
from agent_fsm.testing import InvariantViolation, assert_run_invariants, limits


def _wanderer(limits: Limits) -> Agent:
    """docs/machine.md's wanderer: it reads the same balance again after every result, and never answers."""
    lookup = tool_call_message("w", "balance", {"account": "ACME"})
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 12000)}
    return Agent(ScriptedModel([lookup], reactions={"result": lookup}), tools, limits=limits)


def test_the_wanderer_ends_no_progress_with_its_own_code():
    """Three identical lookups, identical results: no_progress, coded repeated_result, before max_turns."""
    stuck = _wanderer(Limits(max_turns=8, repeated_results=3)).run("Keep checking.")
    assert stuck.stop is Stop.NO_PROGRESS and stuck.code == REPEATED_RESULT == "repeated_result"
    assert stuck.state.turns == 3 and len(stuck.state.observations) == 3
    assert "the same call returned the same result 3 times" in (stuck.reason or "")
    assert list(stuck.state.repeats.values()) == [3]


def test_off_by_default_the_wanderer_runs_to_its_turn_limit():
    """repeated_results defaults to None: a run that repeats a lookup ends as before, step_limit."""
    assert Limits().repeated_results is None
    stuck = _wanderer(Limits(max_turns=5)).run("Keep checking.")
    assert stuck.stop is Stop.STEP_LIMIT and stuck.state.turns == 5
    assert stuck.state.repeats == {}  # off: nothing counted, nothing kept


def test_a_changing_result_is_progress():
    """The same call whose result changes each time is not a loop: the run reaches its answer."""
    counter = iter(range(100))
    lookup = tool_call_message("w", "tick", {})
    done = answer_message("done")
    model = ScriptedModel([lookup, lookup, lookup, lookup, done])
    tools = {"tick": ToolSpec("Count.", {}, lambda: next(counter))}
    result = Agent(model, tools, limits=Limits(max_turns=8, repeated_results=2)).run("Count.")
    assert result.stop is Stop.ANSWERED and result.state.repeats and max(result.state.repeats.values()) == 1


def test_different_arguments_are_different_calls():
    """Argument order does not matter (canonical), but different values do."""
    calls = [
        tool_call_message("a", "add", {"x": 1, "y": 2}),
        tool_call_message("b", "add", {"y": 2, "x": 1}),
        tool_call_message("c", "add", {"x": 2, "y": 1}),
        answer_message("3"),
    ]
    tools = {"add": ToolSpec("Add.", {"x": int, "y": int}, lambda x, y: x + y)}
    result = Agent(ScriptedModel(calls), tools, limits=Limits(repeated_results=3)).run("Add.")
    assert result.stop is Stop.ANSWERED and sorted(result.state.repeats.values()) == [1, 2]
    stopped = Agent(ScriptedModel(calls), tools, limits=Limits(repeated_results=2)).run("Add.")
    assert stopped.stop is Stop.NO_PROGRESS and stopped.code == REPEATED_RESULT and stopped.state.turns == 2


def test_effectful_calls_count_too_and_the_rest_of_the_reply_is_closed():
    """An effectful call repeating its result counts; the reply's calls not yet run are answered as not run."""
    sent: list[str] = []
    note = ToolSpec("Send a note.", {"text": str}, lambda text: sent.append(text) or "sent", effectful=True)
    reply = tool_call_message("n1", "note", {"text": "hi"})
    reply["tool_calls"] += tool_call_message("n2", "note", {"text": "hi"})["tool_calls"]
    reply["tool_calls"] += tool_call_message("n3", "note", {"text": "bye"})["tool_calls"]
    agent = Agent(ScriptedModel([reply]), {"note": note}, limits=Limits(repeated_results=2), gate=allow_all)
    result = agent.run("Note.")
    assert result.stop is Stop.NO_PROGRESS and result.code == REPEATED_RESULT and sent == ["hi", "hi"]
    assert [o.kind for o in result.state.observations] == ["result", "result", "denied"]


def test_the_counts_survive_a_save_and_are_checked_on_load():
    """repeats is saved; counts that claim more results than the run observed are refused on load."""
    stuck = _wanderer(Limits(max_turns=8, repeated_results=3)).run("Keep checking.")
    loaded = RunState.from_json(stuck.state.to_json())
    assert loaded.repeats == stuck.state.repeats and loaded.limits == stuck.state.limits
    data = json.loads(stuck.state.to_json())
    key = next(iter(data["repeats"]))
    data["repeats"][key] = 4
    with pytest.raises(ValueError, match="repeats"):
        RunState.from_json(json.dumps(data))
    data["repeats"] = {key: 0}
    with pytest.raises(ValueError, match="repeats"):
        RunState.from_json(json.dumps(data))


def test_the_async_driver_ends_the_wanderer_the_same_way():
    """arun: the same stop, code and counts as run."""
    stuck = asyncio.run(_wanderer(Limits(max_turns=8, repeated_results=3)).arun("Keep checking."))
    assert stuck.stop is Stop.NO_PROGRESS and stuck.code == REPEATED_RESULT and stuck.state.turns == 3


def test_a_limit_below_two_is_refused():
    """One result is never a repeat: repeated_results=1 would end every run at its first call."""
    with pytest.raises(ValueError):
        Limits(repeated_results=1)


def test_the_kits_invariant_accepts_a_true_repeat_and_flags_a_claimed_one():
    """assert_run_invariants passes the wanderer's repeat, and fails a run claiming one under higher limits."""
    limits = Limits(max_turns=8, repeated_results=3)
    stuck = _wanderer(limits).run("Keep checking.")
    assert_run_invariants(stuck, limits=limits)
    with pytest.raises(InvariantViolation) as caught:
        assert_run_invariants(stuck, limits=Limits(max_turns=8, repeated_results=4))
    assert caught.value.invariant == "stop_justified"
    with pytest.raises(InvariantViolation):
        assert_run_invariants(stuck, limits=Limits(max_turns=8))


@given(drawn=limits(max_turns=(1, 6), wrap_up=False))
def test_random_limits_keep_the_invariants_of_a_looping_run(drawn: Limits):
    """Under any drawn limits (repeated_results among them) the wanderer's run keeps every invariant."""
    result = _wanderer(drawn).run("Keep checking.")
    assert_run_invariants(result, limits=drawn)
    if drawn.repeated_results is not None and drawn.max_turns >= drawn.repeated_results:
        assert result.code == REPEATED_RESULT or result.stop is not Stop.STEP_LIMIT


def test_a_state_saved_without_counts_loads_and_counts_afresh():
    """An empty repeats is left out of the saved text; what one loaded state counts no other loaded state sees."""
    lookup = tool_call_message("w", "balance", {"account": "ACME"})
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 12000)}
    asking = Agent(
        ScriptedModel([lookup], reactions={"result": lookup}),
        tools,
        gate=lambda call: Verdict.ask("a person reads balances"),
        limits=Limits(repeated_results=3),
    )
    paused = asking.run("Keep checking.")
    assert paused.stop is Stop.AWAITING_APPROVAL
    text = paused.state.to_json()
    assert '"repeats"' not in text
    first, second = RunState.from_json(text), RunState.from_json(text)
    again = asking.resume(first, approve=True)
    assert again.stop is Stop.AWAITING_APPROVAL and list(again.state.repeats.values()) == [1]
    assert second.repeats == {} and RunState.from_json(text).repeats == {}


def test_the_counts_travel_through_a_store(opener):
    """A run kept in a store (SQLite on disk, PostgreSQL) ends the same way; its saved counts read back equal."""
    stuck = _wanderer(Limits(max_turns=8, repeated_results=3)).run("Keep checking.", store=opener(), run_id="w1")
    assert stuck.stop is Stop.NO_PROGRESS and stuck.code == REPEATED_RESULT
    kept = opener().load("w1").state
    assert kept.repeats == stuck.state.repeats and list(kept.repeats.values()) == [3] and kept.code == REPEATED_RESULT


def test_screenshots_of_one_size_are_new_results_until_their_bytes_repeat():
    """
    A screenshot tool returns same-size PNGs (one placeholder text): differing bytes are progress; the same
    image again, repeated_results times, is not.
    """
    from agent_fsm import Image
    from tests.media import png

    def shots(frames: list[bytes]) -> Agent:
        taken = iter(frames)
        look = tool_call_message("s", "screen", {})
        tools = {"screen": ToolSpec("Screenshot.", {}, lambda: Image(data=next(taken), media_type="image/png"))}
        return Agent(ScriptedModel([look], reactions={"result": look}), tools, limits=Limits(max_turns=4,
                     max_prompt_tokens=10**6, repeated_results=2))  # fmt: skip

    frames = [png(8, 8, shade) for shade in (0x80, 0x40, 0x20, 0x10)]
    assert len({len(f) for f in frames}) == 1 and len(set(frames)) == 4  # one size, so one placeholder text
    moving = shots(frames).run("Watch.")
    assert moving.stop is Stop.STEP_LIMIT, moving.reason
    still = shots([frames[0]] * 4).run("Watch.")
    assert still.stop is Stop.NO_PROGRESS and still.code == REPEATED_RESULT
