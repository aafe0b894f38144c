"""A reply reviewed whole: every call of one reply that needs a person is decided in one step, or none is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_fsm import (
    Agent,
    AnswerRefused,
    CallDecision,
    RunState,
    ScriptedModel,
    Stop,
    ToolSpec,
    Verdict,
    answer_message,
)
from agent_fsm.engine import DecisionRefused
from agent_fsm.store import SqliteStore, decide_reply
from tests.cli_store import runs

SIZE = {"type": "integer", "minimum": 1, "maximum": 10}


def _reply() -> dict[str, Any]:
    """One assistant message with four calls: two writes the gate asks about, a read, a question for a person."""
    calls = [
        ("w1", "write", {"n": 1}),
        ("r1", "read", {}),
        ("q1", "ask", {"question": "How many?"}),
        ("w2", "write", {"n": 2}),
    ]
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
        ],
    }


def make_agent(log: list[int] | None = None) -> Agent:
    """Writes need a person's approval; reads are allowed; ``ask`` is answered by a person."""
    written = log if log is not None else []
    tools = {
        "write": ToolSpec("Write n.", {"n": int}, lambda n: written.append(n) or f"wrote {n}", effectful=True),
        "read": ToolSpec("Read.", {}, lambda: "read"),
        "ask": ToolSpec.person("Ask the user a number.", {"question": str}, result=SIZE),
    }

    def gate(call: Any) -> Verdict:
        return Verdict("ask", "writes need a person") if call.name == "write" else Verdict("allow", "ok")

    return Agent(ScriptedModel([_reply(), answer_message("all done")]), tools, gate=gate, name="reviewed")


WHOLE = {
    "w1": CallDecision.edited({"n": 5}),
    "q1": CallDecision.answered(3),
    "w2": CallDecision.rejected("not twice"),
}
AT_TOP = {f"t/{call_id}": decision for call_id, decision in WHOLE.items()}
"""WHOLE, reviewed from the nested desk: the nested run's calls addressed through the call ``t`` that runs it."""


def test_the_review_lists_each_call_of_the_reply_that_needs_a_person() -> None:
    """The blocked write, the question and the second write; the allowed read is not asked about."""
    agent = make_agent()
    paused = agent.run("work")
    assert [call.call_id for call in agent.reply_review(paused.state)] == ["w1", "q1", "w2"]


def test_a_reply_is_decided_whole_in_one_step() -> None:
    """Edit, answer and reject applied in order as the run reaches each call; the run goes on to its answer."""
    log: list[int] = []
    agent = make_agent(log)
    paused = agent.run("work")
    done = agent.resume(RunState.from_json(paused.state.to_json()), reply=WHOLE)
    assert done.stop is Stop.ANSWERED and log == [5]
    kinds = [(o.call_id, o.kind, o.content) for o in done.state.observations]
    assert kinds[0] == ("w1", "result", "wrote 5") and kinds[1] == ("r1", "result", "read")
    assert kinds[2] == ("q1", "result", 3)
    assert kinds[3][:2] == ("w2", "denied") and "not twice" in kinds[3][2]
    assert done.state.path.count("AwaitingApproval") == 3 and "TakingAnswer" in done.state.path


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ({"w1": CallDecision.approved(), "q1": CallDecision.answered(3)}, "undecided: ['w2']"),
        ({**WHOLE, "r1": CallDecision.approved()}, "not awaiting a person: ['r1']"),
    ],
)
def test_partial_or_extra_decisions_are_refused_before_anything_runs(reply: dict[str, Any], said: str) -> None:
    """A reply decided in part (or with a call nobody is asked about) is refused whole: nothing ran."""
    log: list[int] = []
    agent = make_agent(log)
    paused = agent.run("work")
    with pytest.raises(DecisionRefused, match=said.replace("[", r"\[").replace("]", r"\]")) as refused:
        agent.resume(paused.state, reply=reply)
    assert refused.value.kind == "PartialDecision" and log == [] and not paused.state.consumed


def test_a_wrong_answer_in_the_reply_refuses_it_whole() -> None:
    """An answer breaking its schema, or an approval of the question without one, refuses every decision."""
    log: list[int] = []
    agent = make_agent(log)
    paused = agent.run("work")
    with pytest.raises(AnswerRefused):
        agent.resume(paused.state, reply={**WHOLE, "q1": CallDecision.answered(11)})
    with pytest.raises(AnswerRefused):
        agent.resume(paused.state, reply={**WHOLE, "q1": CallDecision.approved()})
    assert log == [] and not paused.state.consumed
    assert agent.resume(paused.state, reply=WHOLE).stop is Stop.ANSWERED


def test_the_store_decides_a_reply_once_with_one_record(tmp_path: Path) -> None:
    """decide_reply records one ``reply`` decision holding each call's; a partial one decides nothing."""
    store = SqliteStore(tmp_path / "runs.db")
    log: list[int] = []
    make_agent(log).run("work", store=store, run_id="r")
    with pytest.raises(DecisionRefused):
        decide_reply(store, "r", make_agent(log), reviewer="ana", reply={"w1": CallDecision.approved()})
    assert store.load("r").status == "paused" and store.history("r") == []
    done = decide_reply(store, "r", make_agent(log), reviewer="ana", reply=WHOLE)
    assert done.stop is Stop.ANSWERED and log == [5]
    (record,) = store.history("r")
    assert (record.decision, record.reviewer) == ("reply", "ana")
    assert record.arguments == {"w1": {"arguments": {"n": 5}}, "q1": {"answer": 3}, "w2": {"reject": "not twice"}}


def world() -> Agent:
    """The reviewed agent, as ``--world tests.test_people_reply:world`` loads it."""
    return make_agent()


def test_the_cli_reviews_a_reply_whole(tmp_path: Path) -> None:
    """``runs review RUN --json`` refuses a partial review in one line, then decides the reply whole."""
    store = SqliteStore(tmp_path / "runs.db")
    make_agent().run("work", store=store, run_id="r")
    store.close()
    where = ("--store", f"sqlite:///{tmp_path / 'runs.db'}", "--world", "tests.test_people_reply:world")
    where += ("--reviewer", "ana")
    code, _, err = runs("review", "r", *where, "--json", '{"w1": {"approve": true}}')
    assert code == 1 and "undecided" in err
    code, _, err = runs("review", "r", *where, "--json", '{"w1": {"maybe": 1}}')
    assert code == 1 and "--json" in err
    whole = {"w1": {"approve": True}, "q1": {"answer": 4}, "w2": {"reject": "no"}}
    code, out, _ = runs("review", "r", *where, "--json", json.dumps(whole))
    assert code == 0 and "r: answered" in out


def test_answers_and_reviews_are_decided_once_on_both_databases(opener: Any) -> None:
    """On SQLite and the real PostgreSQL: two reviewers race to review one reply; exactly one decision holds."""
    from agent_fsm.store import AlreadyDecided

    log: list[int] = []
    with opener() as store:
        make_agent(log).run("work", store=store, run_id="race")
    first, second = opener(), opener()
    try:
        pause_id = first.load("race").summary.pause_id
        done = decide_reply(first, "race", make_agent(log), reviewer="ana", reply=WHOLE, pause_id=pause_id)
        with pytest.raises(AlreadyDecided):
            decide_reply(second, "race", make_agent(log), reviewer="bo", reply=WHOLE, pause_id=pause_id)
    finally:
        first.close()
        second.close()
    assert done.stop is Stop.ANSWERED and log == [5]
    with opener() as store:
        (record,) = store.history("race")
        assert (record.decision, record.reviewer, record.arguments["q1"]) == ("reply", "ana", {"answer": 3})


def nested_desk(log: list[int] | None = None) -> Agent:
    """A desk running the reviewed agent as its tool: the reply to review is the nested run's, a level down."""
    from agent_fsm import allow_all, tool_call_message

    inner = make_agent(log).replace(name="reviewed-inner")
    model = ScriptedModel([tool_call_message("t", "inner", {"task": "work"}), answer_message("desk done")])
    return Agent(model, {"inner": inner.as_tool()}, gate=allow_all, name="reviewed-desk")


def test_a_nested_runs_reply_is_reviewed_whole_from_the_top() -> None:
    """The review lists the nested run's calls, addressed through ``t``; decided whole at the top, each applied once."""
    log: list[int] = []
    desk = nested_desk(log)
    paused = desk.run("work")
    assert [call.call_id for call in desk.reply_review(paused.state)] == ["t/w1", "t/q1", "t/w2"]
    with pytest.raises(DecisionRefused, match="undecided"):
        desk.resume(paused.state, reply={"t": CallDecision.approved()})
    with pytest.raises(AnswerRefused):
        desk.resume(paused.state, reply={**AT_TOP, "t/q1": CallDecision.answered(11)})
    assert log == [] and not paused.state.consumed
    done = desk.resume(paused.state, reply=AT_TOP)
    assert done.stop is Stop.ANSWERED and done.answer == "desk done" and log == [5]
    inner = done.state.children["t"]
    kinds = [(o.call_id, o.kind) for o in inner.observations]
    assert kinds == [("w1", "result"), ("r1", "result"), ("q1", "result"), ("w2", "denied")]
    assert inner.observations[2].content == 3


def test_a_nested_reply_is_reviewed_whole_on_the_async_driver_and_a_store(tmp_path: Path) -> None:
    """aresume(reply=) and decide_reply take the nested reply whole too: one record, the run ended."""
    import asyncio

    log: list[int] = []
    paused = asyncio.run(nested_desk(log).arun("work"))
    done = asyncio.run(nested_desk(log).aresume(paused.state, reply=AT_TOP))
    assert done.stop is Stop.ANSWERED and log == [5]
    store = SqliteStore(tmp_path / "runs.db")
    nested_desk(log).run("work", store=store, run_id="n")
    done = decide_reply(store, "n", nested_desk(log), reviewer="ana", reply=AT_TOP)
    assert done.stop is Stop.ANSWERED and log == [5, 5]
    (record,) = store.history("n")
    assert record.decision == "reply" and set(record.arguments) == {"t/w1", "t/q1", "t/w2"}


def test_what_a_nested_pause_asks_names_each_call_by_the_nested_agents_tools() -> None:
    """Serving says a nested reply's calls as the nested agent declares them: the question with its result schema."""
    from agent_fsm.serve.core import asks

    desk = nested_desk()
    asked = asks(desk, desk.run("work").state)
    assert "reply" in asked["decisions"] and [c["call_id"] for c in asked["reply"]] == ["t/w1", "t/q1", "t/w2"]
    assert asked["reply"][1]["result_schema"] == SIZE and "result_schema" not in asked["reply"][0]
