"""Tools per state: tools_for= and declarative tool rules decide what each model call offers; the rest is invalid."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_fsm import (
    Agent,
    Limits,
    RunState,
    Stop,
    ToolDefinitionError,
    ToolsOffered,
    ToolSpec,
    after,
    allow_all,
    at_most_once,
    before,
    ends_run,
    run,
    tool_call_message,
)
from agent_fsm.engine import RunError, check_tool_rules
from agent_fsm.testing import tool_rule_sets


def checkout() -> dict[str, ToolSpec]:
    """A small shop: look, quote, pay (an effect), confirm."""
    return {
        "look": ToolSpec("Look at the cart.", {}, lambda: {"items": 2}),
        "quote": ToolSpec("Quote the price.", {}, lambda: {"cents": 4999}),
        "pay": ToolSpec("Pay the quoted price.", {}, lambda: {"paid": 4999}, effectful=True),
        "confirm": ToolSpec("Confirm the order.", {}, lambda: {"order": "A-17"}),
    }


class Caller:
    """Proposes the scripted calls (one reply per list, a list of names), then answers; keeps what it was offered."""

    def __init__(self, replies: Sequence[Sequence[str]]) -> None:
        self.replies = [list(r) for r in replies]
        self.offered: list[list[str]] = []
        self.turn = 0

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        self.offered.append([t["function"]["name"] for t in tools])
        self.turn += 1
        if self.turn > len(self.replies):
            return {"role": "assistant", "content": "done"}
        names = self.replies[self.turn - 1]
        calls = [tool_call_message(f"t{self.turn}c{i}", n, {})["tool_calls"][0] for i, n in enumerate(names)]
        return {"role": "assistant", "content": None, "tool_calls": calls}


def kinds(result: Any) -> list[str]:
    return [o.kind for o in result.state.observations]


def test_without_rules_every_tool_is_offered_every_turn():
    """The default: the whole registry is declared on every call."""
    model = Caller([["look"], ["quote"]])
    result = Agent(model, checkout(), gate=allow_all).run("buy")
    assert result.stop is Stop.ANSWERED
    assert all(offer == ["look", "quote", "pay", "confirm"] for offer in model.offered)


def test_tools_for_decides_the_offer_and_a_call_outside_it_is_invalid():
    """tools_for= sees the run's state; only its names are declared, a call to another tool is invalid."""

    def by_progress(state: RunState) -> list[str]:
        return ["look"] if not state.observations else ["quote", "pay"]

    model = Caller([["pay"], ["quote"], ["pay"]])
    result = Agent(model, checkout(), gate=allow_all, tools_for=by_progress).run("buy")
    assert result.stop is Stop.ANSWERED
    assert model.offered[0] == ["look"] and model.offered[1] == ["quote", "pay"]
    assert kinds(result) == ["invalid", "result", "result"]
    assert "pay is not offered at this point of the run (offered now: look)" in result.state.observations[0].content


def test_after_opens_a_tool_once_the_other_returned_a_result():
    """after('pay', 'quote'): pay is neither declared nor run until quote has returned."""
    model = Caller([["pay"], ["quote"], ["pay"]])
    result = Agent(model, checkout(), gate=allow_all, tool_rules=[after("pay", "quote")]).run("buy")
    assert "pay" not in model.offered[0] and "pay" in model.offered[2]
    assert kinds(result) == ["invalid", "result", "result"]


def test_at_most_once_closes_a_tool_even_within_one_reply():
    """at_most_once('pay'): the second call of the same reply is invalid, and pay is offered no more."""
    model = Caller([["pay", "pay"], ["look"]])
    result = Agent(model, checkout(), gate=allow_all, tool_rules=[at_most_once("pay")]).run("buy")
    assert kinds(result) == ["result", "invalid", "result"]
    assert "pay" in model.offered[0] and "pay" not in model.offered[1]


def test_before_closes_a_tool_once_the_other_has_run():
    """before('look', 'pay'): once pay ran, looking is over."""
    model = Caller([["pay"], ["look"]])
    result = Agent(model, checkout(), gate=allow_all, tool_rules=[before("look", "pay")]).run("buy")
    assert kinds(result) == ["result", "invalid"]
    assert "look" not in model.offered[1]


def test_ends_run_stops_the_run_after_a_result_and_answers_the_rest_of_the_reply():
    """ends_run('confirm'): its result ends the run tool_ended; later calls of its reply are answered, not run."""
    model = Caller([["quote", "confirm", "pay"], ["look"]])
    result = Agent(model, checkout(), gate=allow_all, tool_rules=[ends_run("confirm")]).run("buy")
    assert result.stop is Stop.TOOL_ENDED and result.code == "tool_ended"
    assert result.answer is None and '"order": "A-17"' in (result.reason or "")
    assert kinds(result) == ["result", "result", "denied"]
    assert result.state.observations[-1].content == "not run: the run stopped (tool_ended)"
    assert result.state.turns == 1 and result.state.path[-1] == "ToolEnded"
    assert RunState.from_json(result.state.to_json()) == result.state


def test_ends_run_does_not_end_on_an_error():
    """A tool that ends the run ends it only by returning a result."""
    from agent_fsm import ToolError

    def refuse() -> None:
        raise ToolError("the shop is closed")

    tools = {**checkout(), "confirm": ToolSpec("Confirm the order.", {}, refuse)}
    result = Agent(Caller([["confirm"]]), tools, tool_rules=[ends_run("confirm")]).run("buy")
    assert result.stop is Stop.ANSWERED and kinds(result) == ["error"]


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ([after("pay", "quote"), after("quote", "pay")], "'pay' is never offered"),
        ([after("pay", "quote"), before("pay", "quote")], "but 'pay' needs a result of 'quote' first"),
        ([after("pay", "refund")], "names 'refund', which is not a tool"),
        (
            [after("confirm", "pay"), after("pay", "quote"), before("quote", "look"), after("quote", "look")],
            "the run can never end by 'confirm'",
        ),
    ],
)
def test_a_rule_set_that_contradicts_itself_is_refused_at_definition(rules: list[Any], message: str):
    """The static checker reads the rules: a tool never offered (a run that could never end by it) is refused."""
    rules = [*rules, ends_run("confirm")]
    with pytest.raises(ToolDefinitionError, match=message):
        Agent(Caller([]), checkout(), tool_rules=rules)
    with pytest.raises(ToolDefinitionError, match=message):
        run("buy", Caller([]), checkout(), tool_rules=rules)


def test_the_checker_reports_every_problem_at_once():
    """Each dead tool and each unknown name is its own violation."""
    found = check_tool_rules([after("a", "b"), after("b", "a"), after("c", "zzz")], ["a", "b", "c"])
    assert sorted((v.rule, v.states) for v in found) == [
        ("never_offered", ("a",)),
        ("never_offered", ("b",)),
        ("unknown_tool", ("zzz",)),
    ]


def test_the_digest_covers_the_rules_but_not_an_agent_without_them():
    """Rules change what is invalid, so they are part of the contract; no rules, the digest is the tools' own."""
    plain = Agent(Caller([]), checkout())
    ruled = plain.replace(tool_rules=[at_most_once("pay")])
    assert plain.digest == Agent(Caller([]), checkout(), tools_for=lambda s: ["look"]).digest
    assert ruled.digest != plain.digest
    assert ruled.digest == plain.replace(tool_rules=(at_most_once("pay"),)).digest


def test_tools_offered_events_name_each_turns_offer():
    """With a per-turn offer, each model call posts ToolsOffered."""
    seen: list[Any] = []
    agent = Agent(Caller([["quote"], ["pay"]]), checkout(), gate=allow_all, tool_rules=[after("pay", "quote")])
    agent.run("buy", on_event=seen.append)
    offers = [e.names for e in seen if isinstance(e, ToolsOffered)]
    everything = ["confirm", "look", "pay", "quote"]
    assert offers == [["confirm", "look", "quote"], everything, everything]


def test_a_paused_call_is_judged_against_the_offer_decided_afresh():
    """A decision after a pause recomputes the offer from the transcript; a saved state cannot unlock a tool."""
    from agent_fsm import ask_for_effects

    tools = checkout()
    model = Caller([["quote", "pay", "pay"]])
    agent = Agent(model, tools, gate=ask_for_effects(tools), tool_rules=[at_most_once("pay")])
    paused = agent.run("buy")
    assert paused.stop is Stop.AWAITING_APPROVAL
    loaded = RunState.from_json(paused.state.to_json())
    done = agent.resume(loaded, approve=True)
    assert kinds(done) == ["result", "result", "invalid"]


def test_a_tools_for_that_fails_is_a_bug_reported_with_the_run():
    """tools_for raising, or naming a tool the agent lacks, raises RunError with the state."""
    with pytest.raises(RunError, match="tools_for raised ZeroDivisionError") as caught:
        Agent(Caller([["look"]]), checkout(), tools_for=lambda s: [1 / 0]).run("buy")
    assert caught.value.state is not None
    with pytest.raises(RunError, match="'refund', which is not a tool"):
        Agent(Caller([["look"]]), checkout(), tools_for=lambda s: ["refund"]).run("buy")


# --- the property: what runs was offered, and every rule held ---

NAMES = ("look", "quote", "pay", "confirm")


@settings(deadline=None, max_examples=80)
@given(
    rules=tool_rule_sets(NAMES),
    replies=st.lists(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3), min_size=1, max_size=8),
    hidden=st.sets(st.sampled_from(NAMES)),
)
def test_every_call_that_runs_was_offered_and_every_rule_holds(
    rules: tuple[Any, ...], replies: list[list[str]], hidden: set[str]
) -> None:
    """Random rules, a random tools_for and random proposals: nothing runs outside the offer or against a rule."""
    model = Caller(replies)
    agent = Agent(
        model,
        checkout(),
        gate=allow_all,
        limits=Limits(max_turns=10, repeated_denials=50, oscillation=60),
        tools_for=lambda state: [n for n in NAMES if n not in hidden],
        tool_rules=rules,
    )
    result = agent.run("buy")
    state = result.state
    ran: list[str] = []  # names of the calls whose handler ran, in order
    ok: set[str] = set()
    names, turn_of, turn = {}, {}, 0
    for m in state.messages:
        if m["role"] == "assistant":
            turn += 1
            for c in m.get("tool_calls") or ():
                names[c["id"]], turn_of[c["id"]] = c["function"]["name"], turn
    for o in state.observations:
        name = names[o.call_id]
        if o.kind in ("result", "error"):
            assert name in model.offered[turn_of[o.call_id] - 1] and name not in hidden
            for rule in rules:
                if rule.kind == "after" and rule.tool == name:
                    assert rule.other in ok
                if rule.kind == "before" and rule.tool == name:
                    assert rule.other not in ran
                if rule.kind == "at_most_once" and rule.tool == name:
                    assert name not in ran
            ran.append(name)
            if o.kind == "result":
                ok.add(name)
    ending = [o for o in state.observations if o.kind == "result" and ends_run(names[o.call_id]) in rules]
    assert (result.stop is Stop.TOOL_ENDED) == bool(ending)
    if ending:
        assert state.observations.index(ending[0]) == len([o for o in state.observations if o.kind != "denied"]) - 1
    assert json.loads(state.to_json())["machine_state"] == state.machine_state
