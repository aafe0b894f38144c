"""A person cancels a paused run: a typed ending of its own, reached by a decision, decided once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from agent_fsm import Agent, NotPaused, RunState, ScriptedModel, Stop, ToolSpec, Verdict, answer_message
from agent_fsm.engine import RUN_MACHINE, tool_message
from agent_fsm.store import AlreadyDecided, DifferentAgent, RunStore, cancel
from tests.test_people_reply_nested import _calls, make_lead


def _reply() -> dict[str, Any]:
    """One assistant message with two writes the gate asks about and a read it allows."""
    return _calls(("w1", "write", {"n": 1}), ("r1", "read", {}), ("w2", "write", {"n": 2}))


def _agent(written: list[int], model: ScriptedModel | None = None) -> Agent:
    tools = {
        "write": ToolSpec("Write n.", {"n": int}, lambda n: written.append(n) or f"wrote {n}", effectful=True),
        "read": ToolSpec("Read.", {}, lambda: "read"),
    }

    def gate(call: Any) -> Verdict:
        return Verdict("ask", "writes need a person") if call.name == "write" else Verdict("allow", "ok")

    return Agent(model or ScriptedModel([_reply(), answer_message("done")]), tools, gate=gate, name="writer")


def test_a_cancelled_pause_ends_the_run_cancelled_with_every_waiting_call_answered_as_not_run() -> None:
    """
    The run ends ``cancelled``: no call of the reply runs, each is answered as not run naming who cancelled
    and why, the transcript before the pause is kept whole, and no model call is made.
    """
    written: list[int] = []
    agent = _agent(written)
    paused = agent.run("work")
    assert paused.stop is Stop.AWAITING_APPROVAL
    before = paused.state.messages[:]
    turns = paused.state.turns
    ended = agent.cancel(paused.state, by="ana", reason="wrong customer")
    assert ended.stop is Stop.CANCELLED and ended.code == "cancelled"
    assert ended.reason == "cancelled by ana: wrong customer"
    state = ended.state
    assert state.machine_state == "Cancelled" and state.path[-2:] == ["AwaitingApproval", "Cancelled"]
    assert written == [] and state.turns == turns and state.pending == []
    assert state.messages[: len(before)] == before
    tools = state.messages[len(before) :]
    assert [m["tool_call_id"] for m in tools] == ["w1", "r1", "w2"]
    assert all(json.loads(m["content"])["content"] == "not run: cancelled by ana: wrong customer" for m in tools)
    assert [o.kind for o in state.observations] == ["denied"] * 3
    assert paused.state.consumed


def test_a_pause_is_cancelled_once_and_a_cancelled_run_takes_no_decision() -> None:
    """Cancelling the same pause twice, or resuming it after, is refused; so is cancelling a run that is not paused."""
    agent = _agent([])
    paused = agent.run("work")
    copy = RunState.from_json(paused.state.to_json())
    ended = agent.cancel(paused.state, by="ana")
    assert ended.reason == "cancelled by ana: no reason given"
    with pytest.raises(NotPaused):
        agent.cancel(paused.state, by="ana")
    with pytest.raises(NotPaused):
        agent.resume(paused.state, approve=True)
    with pytest.raises(NotPaused):
        agent.cancel(ended.state, by="bo")
    decided: set[str] = set()
    first = agent.cancel(copy, by="bo", seen=lambda p: p in decided or bool(decided.add(p)))
    assert first.stop is Stop.CANCELLED
    again = RunState.from_json(paused.state.to_json())
    with pytest.raises(NotPaused):
        agent.cancel(again, by="bo", seen=lambda p: p in decided)


def test_who_cancels_is_named() -> None:
    """``by`` is a person's name: a blank or non-str one is refused and the pause stays open."""
    agent = _agent([])
    paused = agent.run("work")
    for by in ("", "  ", None):
        with pytest.raises(TypeError):
            agent.cancel(paused.state, by=by)  # type: ignore[arg-type]
    assert not paused.state.consumed


def test_cancel_awaited_is_the_same_ending() -> None:
    """``acancel`` ends the run as ``cancel`` does, with the same transcript."""
    sync = _agent([]).cancel(_agent([]).run("work").state, by="ana", reason="late")
    agent = _agent([])
    paused = asyncio.run(agent.arun("work"))
    awaited = asyncio.run(agent.acancel(paused.state, by="ana", reason="late"))
    assert awaited.stop is Stop.CANCELLED and awaited.reason == sync.reason
    assert awaited.state.messages == sync.state.messages


def test_a_cancelled_run_is_saved_and_loaded_and_a_cancelled_state_with_a_waiting_call_is_refused() -> None:
    """The ending survives a save; a state claiming to be cancelled with a call still waiting is not consistent."""
    agent = _agent([])
    ended = agent.cancel(agent.run("work").state, by="ana")
    loaded = RunState.from_json(ended.state.to_json())
    assert loaded.machine_state == "Cancelled" and RUN_MACHINE.stop_of("Cancelled") is Stop.CANCELLED
    data = json.loads(ended.state.to_json())
    forged = RunState.from_json(agent.run("work").state.to_json())
    forged_data = json.loads(forged.to_json())
    forged_data["machine_state"] = "Cancelled"
    forged_data["pause"] = None
    forged_data["pause_id"] = None
    with pytest.raises(ValueError, match="a cancelled run answers every call"):
        RunState.from_json(json.dumps(forged_data))
    assert data["machine_state"] == "Cancelled"


def test_the_events_of_a_cancel_end_with_the_cancelled_ending() -> None:
    """A listener hears each call answered as not run, then the run's end, ``cancelled``."""
    agent = _agent([])
    heard: list[Any] = []
    agent.cancel(agent.run("work").state, by="ana", on_event=heard.append)
    names = [type(e).__name__ for e in heard]
    assert names.count("Observed") == 3 and names[-1] == "Ended"
    assert heard[-1].result.stop is Stop.CANCELLED


def test_the_kit_reaches_the_cancelled_ending_by_a_person_cancelling() -> None:
    """check_reaches_all finds the route to ``Cancelled``: a pause, then a cancel (its only way in)."""
    from agent_fsm.testing import check_reaches_all

    coverage = check_reaches_all(lambda: _agent([]).tools, gate=_agent([]).gate, states=["Cancelled"])
    assert coverage.states["Cancelled"] > 0


def test_random_cancels_end_runs_cancelled_and_every_invariant_holds() -> None:
    """With ``cancelled`` expected, the kit's person cancels some pauses; each cancelled run keeps the invariants."""
    from agent_fsm.testing import check_policy_ends

    coverage = check_policy_ends(
        lambda: ScriptedModel([_reply(), answer_message("done")]),
        lambda: _agent([]),
        ("answered", "cancelled", "awaiting_approval"),
        gate=_agent([]).gate,
    )
    assert coverage.states["Cancelled"] > 0 and coverage.states["Answered"] > 0


def test_the_invariants_catch_a_cancel_that_left_a_call_unanswered() -> None:
    """A cancelled result whose last call is not answered as not run breaks ``cancelled_at_pause``."""
    from agent_fsm.testing import InvariantViolation, assert_run_invariants

    agent = _agent([])
    ended = agent.cancel(agent.run("work").state, by="ana")
    assert_run_invariants(ended)
    forged = attrs.evolve(ended.state.observations[-1], content="denied by the gate")
    ended.state.observations[-1] = forged
    ended.state.messages[-1] = tool_message(forged)
    with pytest.raises(InvariantViolation, match="cancelled_at_pause"):
        assert_run_invariants(ended)


def test_a_stored_pause_is_cancelled_once_from_another_process_on_either_database(
    opener: Callable[[], RunStore],
) -> None:
    """
    ``store.cancel`` ends the stored run ``cancelled``, recorded as a ``cancel`` decision with its reviewer and
    reason; the second of two cancels, and a cancel of an ended run, are AlreadyDecided; nothing was written.
    """
    written: list[int] = []
    _agent(written).run("work", store=opener(), run_id="job-1")
    ended = cancel(opener(), "job-1", _agent(written), reviewer="ana", reason="wrong customer")
    assert ended.stop is Stop.CANCELLED and ended.reason == "cancelled by ana: wrong customer"
    store = opener()
    stored = store.load("job-1")
    assert stored.status == "ended" and stored.summary.stop == "cancelled" and stored.state.machine_state == "Cancelled"
    [decision] = store.history("job-1")
    assert (decision.decision, decision.reviewer, decision.reason) == ("cancel", "ana", "wrong customer")
    with pytest.raises(AlreadyDecided):
        cancel(opener(), "job-1", _agent(written), reviewer="bo")
    assert written == []


def test_a_stored_cancel_names_its_reviewer_and_warns_of_another_agent(opener: Callable[[], RunStore]) -> None:
    """A blank reviewer is refused before anything is decided; an agent other than the pauser's is warned of."""
    _agent([]).run("work", store=opener(), run_id="job-2")
    with pytest.raises(ValueError, match="reviewer"):
        cancel(opener(), "job-2", _agent([]), reviewer=" ")
    assert opener().load("job-2").status == "paused"
    other = _agent([]).replace(name="someone_else")
    with pytest.warns(DifferentAgent, match="paused by agent 'writer', decided by agent 'someone_else'"):
        ended = cancel(opener(), "job-2", other, reviewer="ana")
    assert ended.stop is Stop.CANCELLED


def test_cancelling_a_nested_pause_ends_every_run_down_the_path_cancelled() -> None:
    """A pause inside a nested agent, cancelled at the top: the nested run ends ``cancelled`` too, charged upward."""
    paid: list[int] = []
    lead = make_lead(paid, [])
    paused = lead.run("settle")
    assert paused.blocked_path == ("n1", "c1")
    ended = lead.cancel(RunState.from_json(paused.state.to_json()), by="ana", reason="stop")
    assert ended.stop is Stop.CANCELLED and paid == []
    child = ended.state.children["n1"]
    assert child.machine_state == "Cancelled" and child.pending == []
    assert [json.loads(m["content"])["content"] for m in child.messages if m["role"] == "tool"] == [
        "not run: cancelled by ana: stop"
    ] * 3
    assert ended.state.turns == paused.state.turns + child.turns  # what the nested run spent is charged here
    assert RunState.from_json(ended.state.to_json()).children["n1"].machine_state == "Cancelled"


def test_the_nested_kit_cancels_at_random_and_every_run_down_the_path_ends() -> None:
    """check_nesting's person cancels some pauses: every run of the tree must still end absorbing (checked)."""
    from agent_fsm.testing import check_nesting, nested_worlds

    check_nesting(nested_worlds(max_depth=2, min_depth=2))


def test_a_cancel_three_levels_down_by_the_kit_ends_the_whole_tree_cancelled() -> None:
    """drive_nested with CANCEL at a pause three levels down: every run of the tree ends ``cancelled``, nothing ran."""
    from agent_fsm import Limits, tool_call_message
    from agent_fsm.testing import CANCEL, TableGate, assert_nested_invariants, drive_nested, nested_world

    models = [
        ScriptedModel([tool_call_message("a", "agent_1", {"task": "go"}), answer_message("top done")]),
        ScriptedModel([tool_call_message("b", "agent_2", {"task": "go"}), answer_message("middle done")]),
        ScriptedModel([tool_call_message("w", "write_2", {"n": 4}), answer_message("bottom done")]),
    ]
    gates = [TableGate({"agent_1": "allow"}), TableGate({"agent_2": "allow"}), TableGate({"write_2": "ask"})]
    world = nested_world(models, gates, [Limits(max_turns=10), Limits(max_turns=6), Limits(max_turns=4)])
    outcome = drive_nested(world, lambda result: CANCEL)
    assert_nested_invariants(outcome)
    top = outcome.result.state
    assert outcome.result.stop is Stop.CANCELLED and world.effects == []
    middle = top.children["a"]
    assert [middle.machine_state, middle.children["b"].machine_state] == ["Cancelled", "Cancelled"]
