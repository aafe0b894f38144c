"""Tests for Agent.machine(): the run machine as one agent's configuration can take it, from the driver's own rule."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import (
    RUN_MACHINE,
    RUN_OPTIONS,
    Agent,
    Ending,
    FallbackModel,
    Limits,
    MachineSpec,
    Price,
    Prices,
    ProviderFailure,
    RunState,
    Stop,
    ToolError,
    ToolSpec,
    Verdict,
    allow_all,
    answer_message,
    drop_middle,
    ends_run,
    tool_call_message,
)
from agent_fsm.engine import _run, check_machine


def look(q: str) -> str:
    """An effect-free tool: what it finds, or a permanent failure for the word 'broken'."""
    if q == "broken":
        raise ToolError("the index is gone", permanent=True)
    return f"found {q}" * 5


def finish(q: str) -> str:
    """A tool that, under an ends_run rule, ends the run."""
    return "finished"


class Playing:
    """Plays ``replies`` in order, one per model call the transcript shows, then answers; a None reply fails."""

    def __init__(self, replies: Sequence[Mapping[str, Any] | None], model: str = "m") -> None:
        self.replies = list(replies)
        self.model = model

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        asked = sum(1 for m in messages if m.get("role") == "assistant")
        if asked < len(self.replies):
            reply = self.replies[asked]
            if reply is None:
                raise ProviderFailure("down", kind="http", status=503)
            return reply
        return answer_message('{"ok": true}')


PLAIN = Agent(Playing([]), {"look": ToolSpec("look something up", {"q": str}, look)}, name="plain")

OPTION_NAMES = [option.name for option in RUN_OPTIONS]

_ids = itertools.count()


@st.composite
def replies(draw: st.DrawFn) -> list[Mapping[str, Any] | None]:
    """Model replies: calls to the tools (valid, invalid, unknown), answers, typed or not, and failures."""
    found: list[Mapping[str, Any] | None] = []
    for _ in range(draw(st.integers(0, 6))):
        kinds = ["look", "look", "broken", "finish", "expert", "bad", "unknown", "answer", "typed", "fail"]
        kind = draw(st.sampled_from(kinds))
        call_id = f"c{next(_ids)}"
        if kind == "look":
            found.append(tool_call_message(call_id, "look", {"q": draw(st.sampled_from(["a", "secret", "b"]))}))
        elif kind == "broken":
            found.append(tool_call_message(call_id, "look", {"q": "broken"}))
        elif kind == "finish":
            found.append(tool_call_message(call_id, "finish", {"q": "x"}))
        elif kind == "expert":
            found.append(tool_call_message(call_id, "expert", {}))
        elif kind == "bad":
            found.append(tool_call_message(call_id, "look", {"q": 3}))
        elif kind == "unknown":
            found.append(tool_call_message(call_id, "nothing", {}))
        elif kind == "answer":
            found.append(answer_message("plain words"))
        elif kind == "typed":
            found.append(answer_message('{"ok": true}'))
        else:
            found.append(None)
    return found


def _screen_task(task: str, state: RunState) -> Ending | None:
    return Ending("refused_word", "the task says no") if "no" in task else None


def _screen_result(observation: Any, state: RunState) -> Ending | None:
    return Ending("secret_seen", "a secret") if "secret" in str(observation.content) else None


@st.composite
def configured(draw: st.DrawFn) -> tuple[Agent, str, list[bool]]:
    """An agent with a random choice of the options and gate, a task, and a person's decisions at its pauses."""
    taken = draw(st.sets(st.sampled_from(OPTION_NAMES)))
    script = draw(replies())
    model: Any = Playing(script)
    if "fallback models" in taken:
        model = FallbackModel(Playing([None, *script]), Playing(script, model="b"))
    tools: dict[str, ToolSpec] = {
        "look": ToolSpec("look something up", {"q": str}, look, max_calls=2 if "per-tool caps" in taken else None),
        "finish": ToolSpec("finish the work", {"q": str}, finish),
    }
    if "handoffs" in taken:
        tools["expert"] = Agent(Playing([answer_message("the expert's word")]), {}, name="expert").handoff("ask")
    options: dict[str, Any] = {}
    limits: dict[str, Any] = {
        "max_turns": draw(st.integers(1, 6)),
        "max_prompt_tokens": draw(st.sampled_from([400, 4000])),
    }
    if "cost budget" in taken:
        limits |= {"max_output_tokens": 50, "max_cost": draw(st.sampled_from([Decimal("0.0004"), Decimal(1)]))}
        options["prices"] = Prices(default=Price(Decimal(1), Decimal(1)))
    if "time budget" in taken:
        limits["max_seconds"] = 600.0
    if "tool budget" in taken:
        limits["max_tool_calls"] = draw(st.integers(0, 3))
    if "wrap-up" in taken:
        limits["wrap_up"] = True
    if "repeated results" in taken:
        limits["repeated_results"] = draw(st.integers(2, 3))
    if "compaction" in taken:
        options |= {"compact": drop_middle(1), "compact_at": draw(st.sampled_from([0, 150]))}
    if "typed output" in taken:
        options["output"] = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    if "tools that end the run" in taken:
        options["tool_rules"] = [ends_run("finish")]
    if "input screen" in taken:
        options["screen_input"] = _screen_task
    if "result screen" in taken:
        options["screen_result"] = _screen_result
    gate = draw(st.sampled_from([allow_all, _asks_to_finish]))
    agent = Agent(model, tools, gate=gate, limits=Limits(**limits), **options)
    return agent, draw(st.sampled_from(["find a and b", "say no"])), draw(st.lists(st.booleans(), max_size=3))


def _asks_to_finish(call: Any) -> Verdict:
    """A gate that asks a person before 'finish' runs, and allows the rest."""
    return Verdict.ask("a person finishes the work") if call.name == "finish" else Verdict.allow()


def _played(agent: Agent, task: str, decisions: list[bool]) -> Any:
    """The run, each pause decided in turn by ``decisions`` (then left paused)."""
    result = agent.run(task)
    for approve in decisions:
        if result.stop is not Stop.AWAITING_APPROVAL:
            break
        result = agent.resume(result.state, approve=approve)
    return result


def _steps(state: RunState) -> list[tuple[str, str]]:
    return list(itertools.pairwise(["Ready", *state.path]))


def _pairs(machine: MachineSpec) -> set[tuple[str, str]]:
    return {(e.source, e.dest) for e in machine.edges}


@given(configured())
def test_every_edge_a_run_takes_is_in_its_agents_machine(case: tuple[Agent, str, list[bool]]) -> None:
    """
    Over random configurations, every move of a run (and of a run it handed over to) is an edge of its agent's
    machine; and the restriction changes no move: the whole table drives the same path.
    """
    agent, task, decisions = case
    result = _played(agent, task, decisions)
    machine = agent.machine()
    assert set(_steps(result.state)) <= _pairs(machine), (sorted(set(_steps(result.state)) - _pairs(machine)), machine)
    for key, child in result.state.children.items():
        expert = agent.tools["expert"].handler.agent  # type: ignore[attr-defined]
        # A nested run is held to its parent's budgets too: its machine is restricted by the limits it ran under.
        assert set(_steps(child)) <= _pairs(expert.machine(limits=child.limits)), key
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_run, "ruled_out", lambda agent, limits: frozenset())
        whole = _played(agent, task, decisions)
    assert whole.state.path == result.state.path and whole.stop is result.stop


def test_a_plain_agent_draws_only_the_states_it_can_enter() -> None:
    """One effect-free tool and nothing else: none of the optional states, and the proof holds."""
    names = {s.name for s in PLAIN.machine().states}
    assert names == {
        "Ready", "Proposing", "Executing", "Denied", "AwaitingApproval",
        "Answered", "AnswerRejected", "StepLimit", "TokenLimit", "NoProgress", "ProviderError", "Handoff",
        "Cancelled",
    }  # fmt: skip
    for absent in (
        "ScreeningInput",
        "Compacting",
        "CostLimit",
        "OutputInvalid",
        "HandedOver",
        "ToolEnded",
        "Intercepted",
    ):
        assert absent not in names
    assert check_machine(PLAIN.machine()).ok
    assert set(PLAIN.machine().budgets) == {"turns", "pending_calls", "decisions"}


def test_every_option_taken_gives_the_whole_table() -> None:
    """With every option taken, the agent's machine is the run machine itself."""
    expert = Agent(Playing([]), {}, name="expert")
    tools = {
        "look": ToolSpec("look", {"q": str}, look, max_calls=1),
        "finish": ToolSpec("finish", {"q": str}, finish),
        "expert": expert.handoff("ask"),
        "ask": ToolSpec.person("ask a person", {"q": str}, result={"type": "string"}),
    }
    agent = Agent(
        FallbackModel(Playing([]), Playing([])),
        tools,
        limits=Limits(
            max_cost=Decimal(1),
            max_output_tokens=10,
            max_seconds=9.0,
            max_tool_calls=3,
            repeated_results=2,
            wrap_up=True,
        ),
        prices=Prices(default=Price(Decimal(1), Decimal(1))),
        compact=drop_middle(),
        output={"type": "object"},
        tool_rules=[ends_run("finish")],
        screen_input=_screen_task,
        screen_result=_screen_result,
    )
    assert agent.machine() == RUN_MACHINE


def test_limits_given_to_machine_are_those_it_is_restricted_by() -> None:
    """machine(limits=...) restricts by the limits a run is held to: a cost budget brings CostLimit."""
    assert "CostLimit" not in {s.name for s in PLAIN.machine().states}
    held = Limits(max_cost=Decimal(1), max_output_tokens=10)
    assert "CostLimit" in {s.name for s in PLAIN.machine(limits=held).states}


@pytest.mark.parametrize("option", RUN_OPTIONS, ids=lambda o: o.name)
def test_each_option_brings_states_or_edges_and_the_proof_still_holds(option: Any) -> None:
    """Every declared option adds at least one edge to the plain agent's machine, and the result is proved to end."""
    without = RUN_MACHINE.without(option.guards)
    assert set(RUN_MACHINE.edges) - set(without.edges)
    assert check_machine(without).ok, str(check_machine(without))
