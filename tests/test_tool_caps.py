"""Per-tool caps: ToolSpec(max_calls=N) refuses the calls past N with a reason the model reads."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_fsm import (
    Agent,
    Judged,
    Limits,
    RunEvent,
    RunState,
    ScriptedModel,
    StateEntered,
    Stop,
    ToolDefinitionError,
    ToolSpec,
    answer_message,
    tool_call_message,
)
from agent_fsm.engine import contract_digest


def _tools(calls: list[str], cap: int | None = 1) -> dict[str, ToolSpec]:
    def search(query: str) -> str:
        calls.append(query)
        return f"results for {query}"

    return {
        "search": ToolSpec("Search the web (costly).", {"query": str}, search, max_calls=cap),
        "note": ToolSpec("Take a note.", {"text": str}, lambda text: "noted"),
    }


def _search(turn: int, query: str = "q") -> dict[str, Any]:
    return tool_call_message(f"c{turn}", "search", {"query": f"{query}{turn}"})


def test_a_call_past_the_cap_is_refused_and_the_run_goes_on() -> None:
    """The second search is denied with a reason naming the cap; the model reads it and answers."""
    calls: list[str] = []
    model = ScriptedModel([_search(1), _search(2), answer_message("enough")])
    events: list[RunEvent] = []
    result = Agent(model, _tools(calls)).run("find", on_event=events.append)
    assert result.stop is Stop.ANSWERED and calls == ["q1"]
    assert [o.kind for o in result.state.observations] == ["result", "denied"]
    refusal = result.state.observations[1].content
    assert "search may be called at most 1 time(s)" in refusal
    assert result.state.tool_uses == {"search": 1} and result.state.tool_attempts == 1
    guards = [e.guard for e in events if isinstance(e, StateEntered) and e.state == "Denied"]
    assert guards == ["tool_cap_reached"]
    assert [e.kind for e in events if isinstance(e, Judged)] == ["allow", "denied"]


def test_refusals_past_the_cap_are_counted_toward_no_progress() -> None:
    """The same capped call proposed again and again ends no_progress, like any repeated refusal."""
    calls: list[str] = []
    again = _search(9)
    model = ScriptedModel([_search(1), again], reactions={"at most": again})
    result = Agent(model, _tools(calls), limits=Limits(max_turns=10)).run("find")
    assert result.stop is Stop.NO_PROGRESS
    assert calls == ["q1"] and [o.kind for o in result.state.observations] == ["result", "denied", "denied"]


def test_other_tools_and_uncapped_tools_are_not_counted() -> None:
    """Only tools with a cap are counted; a cap of zero refuses every call."""
    calls: list[str] = []
    note = tool_call_message("n1", "note", {"text": "x"})
    result = Agent(ScriptedModel([note, _search(1), answer_message("ok")]), _tools(calls, cap=0)).run("t")
    assert calls == [] and result.state.tool_uses == {}
    assert [o.kind for o in result.state.observations] == ["result", "denied"]


def test_the_count_survives_a_save_and_a_forged_count_is_refused() -> None:
    """tool_uses is saved; the strict reader refuses a count that is not a whole number >= 1."""
    calls: list[str] = []
    state = Agent(ScriptedModel([_search(1), answer_message("ok")]), _tools(calls)).run("t").state
    assert RunState.from_json(state.to_json()) == state
    data = json.loads(state.to_json())
    data["tool_uses"]["search"] = 0
    with pytest.raises(ValueError, match="tool_uses.search"):
        RunState.from_json(json.dumps(data))


def test_a_cap_is_checked_when_defined_and_is_part_of_the_contract() -> None:
    """A negative or boolean cap is refused at once; a cap changes the agent's contract digest."""
    with pytest.raises(ToolDefinitionError, match="max_calls"):
        ToolSpec("x", {"a": str}, lambda a: a, max_calls=-1)
    with pytest.raises(ToolDefinitionError, match="max_calls"):
        ToolSpec("x", {"a": str}, lambda a: a, max_calls=True)
    plain = {"x": ToolSpec("x", {"a": str}, lambda a: a)}
    capped = {"x": ToolSpec("x", {"a": str}, lambda a: a, max_calls=3)}
    assert contract_digest(plain) != contract_digest(capped)


@settings(deadline=None)
@given(
    cap=st.integers(0, 4),
    proposals=st.lists(st.sampled_from(["search", "note"]), max_size=12),
)
def test_a_capped_tool_never_runs_more_than_its_cap(cap: int, proposals: list[str]) -> None:
    """Whatever the model proposes: the handler runs at most max_calls times, each extra call is denied with why."""
    calls: list[str] = []
    turns = [
        _search(i) if name == "search" else tool_call_message(f"n{i}", "note", {"text": str(i)})
        for i, name in enumerate(proposals)
    ]
    limits = Limits(max_turns=20, repeated_denials=20, oscillation=20)
    result = Agent(ScriptedModel([*turns, answer_message("done")]), _tools(calls, cap), limits=limits).run("t")
    searches = proposals.count("search")
    assert len(calls) == min(cap, searches)
    assert result.state.tool_uses.get("search", 0) == len(calls)
    refused = [o for o in result.state.observations if o.kind == "denied"]
    assert len(refused) == searches - len(calls)
    assert all("at most" in o.content for o in refused)
