"""A tool whose result a person gives: every call pauses, the answer is checked against the result schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from agent_fsm import (
    Agent,
    AnswerRefused,
    NotPaused,
    RunState,
    ScriptedModel,
    StateError,
    Stop,
    ToolDefinitionError,
    ToolSpec,
    Verdict,
    allow_all,
    answer_message,
    check_run,
    tool_call_message,
)
from agent_fsm.store import SqliteStore, answer, approve
from agent_fsm.store.errors import AlreadyDecided
from agent_fsm.testing import answers, check_reaches_all, invalid_answers

COLOUR = {
    "type": "object",
    "properties": {"colour": {"enum": ["red", "blue"]}, "why": {"type": "string"}},
    "required": ["colour"],
    "additionalProperties": False,
}


def ask_colour() -> ToolSpec:
    return ToolSpec.person("Ask the user which colour they want.", {"question": str}, result=COLOUR)


def agent(gate: Any = allow_all, **options: Any) -> Agent:
    script = [tool_call_message("c1", "ask", {"question": "Which colour?"}), answer_message("painted")]
    return Agent(ScriptedModel(script), {"ask": ask_colour()}, gate=gate, name="painter", **options)


def test_every_call_pauses_with_the_question_and_the_answer_becomes_the_result() -> None:
    """The call pauses though the gate allows it; the valid answer is the call's ``result`` observation."""
    painter = agent()
    paused = painter.run("paint the door")
    assert paused.stop is Stop.AWAITING_APPROVAL
    assert paused.blocked_on is not None and paused.blocked_on.arguments == {"question": "Which colour?"}
    assert paused.state.path[-2:] == ["Proposing", "AwaitingApproval"]
    done = painter.resume(RunState.from_json(paused.state.to_json()), answer={"colour": "red"})
    assert done.stop is Stop.ANSWERED and done.answer == "painted"
    observation = done.state.observations[-1]
    assert (observation.kind, observation.ok, observation.content) == ("result", True, {"colour": "red"})
    assert done.state.path[-5:-2] == ["AwaitingApproval", "TakingAnswer", "Ready"]
    assert json.loads(done.state.messages[3]["content"])["content"] == {"colour": "red"}


def test_a_wrong_answer_is_refused_to_the_person_and_the_pause_stays_open() -> None:
    """An answer breaking the schema raises AnswerRefused listing why; nothing is decided, the model sees nothing."""
    painter = agent()
    paused = painter.run("paint the door")
    for wrong in ({"colour": "green"}, {"why": "no colour"}, "red", None, {"colour": "red", "extra": 1}):
        with pytest.raises(AnswerRefused) as refused:
            painter.resume(paused.state, answer=wrong)
        assert refused.value.kind == "BadAnswer" and refused.value.problems
        assert not paused.state.consumed and paused.state.machine_state == "AwaitingApproval"
    done = painter.resume(paused.state, answer={"colour": "blue", "why": "sky"})
    assert done.stop is Stop.ANSWERED
    assert all("green" not in json.dumps(m) for m in done.state.messages)


def test_an_answer_is_decided_once() -> None:
    """A paused state answered once cannot be answered again (or approved, or rejected)."""
    painter = agent()
    paused = painter.run("paint the door")
    painter.resume(paused.state, answer={"colour": "red"})
    with pytest.raises(NotPaused):
        painter.resume(paused.state, answer={"colour": "blue"})
    with pytest.raises(NotPaused):
        painter.resume(paused.state, approve=False)


def test_approval_without_an_answer_is_refused_and_rejection_is_a_denial() -> None:
    """A call a person answers is not approved blank; rejecting it tells the model it was declined."""
    painter = agent()
    paused = painter.run("paint the door")
    with pytest.raises(AnswerRefused, match="answer it, or reject it"):
        painter.resume(paused.state, approve=True)
    with pytest.raises(TypeError):
        painter.resume(paused.state, approve=False, answer={"colour": "red"})
    declined = painter.resume(paused.state, approve=False, reason="ask me later")
    assert declined.state.observations[-1].kind == "denied"
    assert "ask me later" in declined.state.observations[-1].content


def test_an_answer_to_a_call_nobody_answers_is_refused() -> None:
    """``answer=`` on a pause of an ordinary tool is refused before anything is decided."""
    log: list[int] = []
    tools = {"write": ToolSpec("Write n.", {"n": int}, lambda n: log.append(n), effectful=True)}
    script = [tool_call_message("c1", "write", {"n": 1}), answer_message("ok")]
    writer = Agent(ScriptedModel(script), tools, gate=lambda call: Verdict("ask", "check"))
    paused = writer.run("write")
    with pytest.raises(AnswerRefused, match="not answered by a person"):
        writer.resume(paused.state, answer=1)
    assert log == [] and not paused.state.consumed


def test_the_gate_judges_the_call_before_the_person_is_asked() -> None:
    """A denied question never reaches a person; one the gate asks about is answered like any other."""
    denied = agent(gate=lambda call: Verdict("deny", "no questions today")).run("paint")
    assert denied.stop is Stop.ANSWERED and denied.state.observations[0].kind == "denied"
    asked = agent(gate=lambda call: Verdict("ask", "a person decides"))
    paused = asked.run("paint")
    assert paused.stop is Stop.AWAITING_APPROVAL
    assert asked.resume(paused.state, answer={"colour": "red"}).state.observations[0].content == {"colour": "red"}


def test_a_forged_saved_state_is_refused() -> None:
    """A saved pause whose question was edited no longer matches its fingerprint: the strict reader refuses it."""
    paused = agent().run("paint")
    data = json.loads(paused.state.to_json())
    text = json.dumps(data).replace("Which colour?", "Which car?")
    with pytest.raises((ValueError, StateError)):
        agent().resume(RunState.from_json(text), answer={"colour": "red"})
    signed = paused.state.to_json(key=b"k" * 32)
    forged = signed.replace("Which colour?", "Which car?")
    with pytest.raises(ValueError, match="signature"):
        RunState.from_json(forged, key=b"k" * 32)


def test_the_result_schema_is_checked_when_the_tool_is_declared() -> None:
    """A result schema that is not a schema is refused at definition, and it enters the contract digest."""
    with pytest.raises(ToolDefinitionError):
        ToolSpec.person("Ask.", {"q": str}, result={"type": "no such type"})
    one = Agent(ScriptedModel([answer_message("x")]), {"ask": ask_colour()})
    other = Agent(
        ScriptedModel([answer_message("x")]),
        {"ask": ToolSpec.person("Ask the user which colour they want.", {"question": str}, result={"type": "string"})},
    )
    assert one.digest != other.digest


def test_the_machine_brings_taking_answer_only_with_a_person_tool() -> None:
    """TakingAnswer and the answer edge are one option of the agent: absent without a tool a person answers."""
    plain = Agent(ScriptedModel([answer_message("x")]), {})
    assert "TakingAnswer" not in {s.name for s in plain.machine().states}
    machine = agent().machine()
    assert "TakingAnswer" in {s.name for s in machine.states}
    (edge,) = [e for e in machine.edges if e.event == "answer"]
    assert (edge.source, edge.dest, edge.consumes) == ("AwaitingApproval", "TakingAnswer", "decisions")


def test_the_store_answers_once_and_records_who(tmp_path: Path) -> None:
    """store.answer checks the answer before deciding, records the reviewer and the answer, and decides once."""
    store = SqliteStore(tmp_path / "runs.db")
    painter = agent()
    paused = painter.run("paint", store=store, run_id="r1")
    assert paused.stop is Stop.AWAITING_APPROVAL
    with pytest.raises(AnswerRefused):
        answer(store, "r1", painter, reviewer="ana", answer={"colour": "green"})
    assert store.load("r1").status == "paused" and store.history("r1") == []
    with pytest.raises(AnswerRefused):
        approve(store, "r1", painter, reviewer="ana")
    done = answer(store, "r1", agent(), reviewer="ana", answer={"colour": "blue"})
    assert done.stop is Stop.ANSWERED
    (decision,) = store.history("r1")
    assert (decision.decision, decision.reviewer, decision.arguments) == (
        "answer",
        "ana",
        {"answer": {"colour": "blue"}},
    )
    with pytest.raises(AlreadyDecided):
        answer(store, "r1", agent(), reviewer="bo", answer={"colour": "red"})


def levels() -> Agent:
    """top nests middle, which nests bottom, whose ``ask`` a person answers (also served on Temporal)."""
    bottom = Agent(
        ScriptedModel([tool_call_message("q", "ask", {"question": "Which?"}), answer_message("bottom done")]),
        {"ask": ask_colour()},
        gate=allow_all,
        name="answer-bottom",
    )
    middle = Agent(
        ScriptedModel([tool_call_message("m", "bottom", {"task": "t"}), answer_message("middle done")]),
        {"bottom": bottom.as_tool()},
        gate=allow_all,
        name="answer-middle",
    )
    return Agent(
        ScriptedModel([tool_call_message("t", "middle", {"task": "t"}), answer_message("top done")]),
        {"middle": middle.as_tool()},
        gate=allow_all,
        name="answer-top",
    )


def test_a_person_answers_two_levels_down() -> None:
    """A question asked by a run nested two levels deep is answered at the top; the answer is checked there."""
    top = levels()
    paused = top.run("task")
    assert paused.stop is Stop.AWAITING_APPROVAL and paused.blocked_on is not None
    assert paused.blocked_on.name == "ask"
    with pytest.raises(AnswerRefused):
        top.resume(paused.state, answer={"colour": "green"})
    with pytest.raises(AnswerRefused):
        top.resume(paused.state, approve=True)
    done = top.resume(RunState.from_json(paused.state.to_json()), answer={"colour": "red"})
    assert done.stop is Stop.ANSWERED and done.answer == "top done"
    leaf = done.state.children["t"].children["m"]
    assert leaf.observations[0].content == {"colour": "red"} and "TakingAnswer" in leaf.path


def world() -> Agent:
    """The painter, as ``agent-fsm runs --world tests.test_people_answer:world`` loads it."""
    return agent()


def test_the_cli_answers_and_refuses_a_wrong_answer_in_one_line(tmp_path: Path) -> None:
    """``runs answer RUN --json`` refuses JSON that breaks the schema (the run stays paused), then answers once."""
    from tests.cli_store import runs

    store = SqliteStore(tmp_path / "runs.db")
    agent().run("paint", store=store, run_id="r1")
    store.close()
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    where = ("--store", url, "--world", "tests.test_people_answer:world", "--reviewer", "ana")
    code, _, err = runs("answer", "r1", *where, "--json", '{"colour": "green"}')
    assert code == 1 and "result schema" in err and "green" in err
    code, _, err = runs("answer", "r1", *where, "--json", "{colour")
    assert code == 1 and "--json is not JSON" in err
    code, out, _ = runs("answer", "r1", *where, "--json", '{"colour": "red"}')
    assert code == 0 and "r1: answered" in out
    code, _, err = runs("answer", "r1", *where, "--json", '{"colour": "red"}')
    assert code == 1


RICH = {
    "type": "object",
    "properties": {
        "size": {"type": "integer", "minimum": 1, "maximum": 9},
        "colour": {"enum": ["red", "blue"]},
        "notes": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    },
    "required": ["size", "colour"],
    "additionalProperties": False,
}
PERSON_TOOLS = {"order": ToolSpec.person("Ask the user what to order.", {"item": str}, result=RICH)}


def _paused_order() -> tuple[Agent, Any]:
    script = [tool_call_message("c1", "order", {"item": "paint"}), answer_message("ordered")]
    orderer = Agent(ScriptedModel(script), PERSON_TOOLS, gate=allow_all, name="orderer")
    return orderer, orderer.run("order paint")


@settings(max_examples=40)
@given(value=answers(PERSON_TOOLS, "order"))
def test_any_valid_answer_becomes_the_result_and_the_run_holds_its_invariants(value: Any) -> None:
    """A drawn valid answer is the call's result, exactly, and the answered run passes every run invariant."""
    orderer, paused = _paused_order()
    done = orderer.resume(RunState.from_json(paused.state.to_json()), answer=value)
    assert done.stop is Stop.ANSWERED and done.state.observations[0].content == value
    assert all(check_run(done, [], done.state.limits or orderer.limits).values())
    assert RunState.from_json(done.state.to_json()).to_json() == done.state.to_json()


@settings(max_examples=40)
@given(value=invalid_answers(PERSON_TOOLS, "order"))
def test_any_invalid_answer_is_refused_and_decides_nothing(value: Any) -> None:
    """A drawn answer the schema refuses raises AnswerRefused; the pause stays open and can still be answered."""
    orderer, paused = _paused_order()
    with pytest.raises(AnswerRefused) as refused:
        orderer.resume(paused.state, answer=value)
    assert refused.value.problems and not paused.state.consumed
    assert orderer.resume(paused.state, answer={"size": 1, "colour": "red"}).stop is Stop.ANSWERED


def test_the_kit_reaches_taking_answer_in_a_world_with_a_person_tool() -> None:
    """check_reaches_all answers a person's call with the simplest valid answer: TakingAnswer is entered."""
    coverage = check_reaches_all(lambda: dict(PERSON_TOOLS), states=["TakingAnswer", "AwaitingApproval"])
    assert "TakingAnswer" in coverage.states


def test_a_state_forged_into_taking_answer_records_no_answer() -> None:
    """A saved state moved by hand into TakingAnswer carries no answer: driven on, the call pauses again."""
    painter = agent()
    paused = painter.run("paint")
    data = json.loads(paused.state.to_json())
    data["machine_state"] = "TakingAnswer"
    data["path"] = [*data["path"], "TakingAnswer"]
    data["pause"], data["pause_id"] = None, None
    again = painter.advance(RunState.from_json(json.dumps(data)))
    assert again.stop is Stop.AWAITING_APPROVAL and again.state.observations == []
    assert again.state.path[-3:] == ["TakingAnswer", "Proposing", "AwaitingApproval"]  # judged afresh, asked again
