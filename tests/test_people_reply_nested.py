"""A reply reviewed whole when the blocked call is a nested agent's: every call a person must decide, at every level."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_fsm import Agent, CallDecision, RunState, ScriptedModel, Stop, ToolSpec, Verdict, answer_message
from agent_fsm.engine import DecisionRefused
from agent_fsm.store import SqliteStore, decide_reply
from tests.test_parallel_calls import _reply as _calls

SIZE = {"type": "integer", "minimum": 1, "maximum": 10}


def make_lead(paid: list[int], written: list[int]) -> Agent:
    """
    A lead whose one reply delegates to a payer (``n1``) and writes (``w2``, asked about by the lead's gate); the
    payer's one reply pays twice (``c1``, ``c2``, each asked about by its gate) and asks a person (``q3``).
    """
    payer_tools = {
        "pay": ToolSpec("Pay n.", {"n": int}, lambda n: paid.append(n) or f"paid {n}", effectful=True),
        "ask": ToolSpec.person("Ask the size.", {"question": str}, result=SIZE),
    }
    payer = Agent(
        ScriptedModel(
            [
                _calls(("c1", "pay", {"n": 1}), ("c2", "pay", {"n": 2}), ("q3", "ask", {"question": "?"})),
                answer_message("paid"),
            ]
        ),
        payer_tools,
        gate=lambda call: Verdict("ask", "payments need a person") if call.name == "pay" else Verdict("allow", "ok"),
        name="payer",
    )
    tools = {
        "payer": payer.as_tool("Pay what the task says."),
        "write": ToolSpec("Write n.", {"n": int}, lambda n: written.append(n) or f"wrote {n}", effectful=True),
    }
    return Agent(
        ScriptedModel([_calls(("n1", "payer", {"task": "pay"}), ("w2", "write", {"n": 7})), answer_message("done")]),
        tools,
        gate=lambda call: Verdict("ask", "writes need a person") if call.name == "write" else Verdict("allow", "ok"),
        name="lead",
    )


WHOLE = {
    "n1/c1": CallDecision.edited({"n": 5}),
    "n1/c2": CallDecision.rejected("once is enough"),
    "n1/q3": CallDecision.answered(3),
    "w2": CallDecision.approved(),
}


def test_the_review_of_a_nested_pause_lists_every_call_a_person_decides_at_every_level() -> None:
    """The nested run's blocked call and its reply's other calls (addressed through ``n1``), then the lead's own."""
    lead = make_lead([], [])
    paused = lead.run("settle")
    assert paused.stop is Stop.AWAITING_APPROVAL and paused.blocked_path == ("n1", "c1")
    review = lead.reply_review(paused.state)
    assert [(c.call_id, c.name) for c in review] == [
        ("n1/c1", "pay"),
        ("n1/c2", "pay"),
        ("n1/q3", "ask"),
        ("w2", "write"),
    ]


def test_a_nested_reply_and_its_parents_calls_are_decided_in_one_step() -> None:
    """One ``resume(reply=...)`` decides the nested calls and the lead's own: the run goes on to its answer."""
    paid: list[int] = []
    written: list[int] = []
    lead = make_lead(paid, written)
    paused = lead.run("settle")
    done = lead.resume(RunState.from_json(paused.state.to_json()), reply=WHOLE)
    assert done.stop is Stop.ANSWERED, done.reason
    assert paid == [5] and written == [7]
    child = done.state.children["n1"]
    assert [o.kind for o in child.observations] == ["result", "denied", "result"]
    assert child.observations[2].content == 3


def test_a_partial_review_of_a_nested_pause_is_refused_before_anything_runs() -> None:
    """Leaving out a nested call, or giving a wrong answer to one, decides nothing at any level."""
    paid: list[int] = []
    lead = make_lead(paid, [])
    paused = lead.run("settle")
    partial = {k: v for k, v in WHOLE.items() if k != "n1/c2"}
    with pytest.raises(DecisionRefused, match="n1/c2"):
        lead.resume(paused.state, reply=partial)
    with pytest.raises(DecisionRefused):
        lead.resume(paused.state, reply={**WHOLE, "n1/q3": CallDecision.answered(99)})
    assert not paused.state.consumed and paid == []


def test_each_level_judges_its_own_calls_afresh() -> None:
    """A lead whose gate now denies the delegation runs nothing below it, whatever the review approved."""
    paid: list[int] = []
    lead = make_lead(paid, [])
    paused = lead.run("settle")
    gate = lead.gate
    assert gate is not None
    strict = lead.replace(
        gate=lambda call: Verdict("deny", "no more delegation") if call.name == "payer" else gate(call)
    )
    done = strict.resume(paused.state, reply=WHOLE)
    assert paid == [] and done.state.observations[0].kind == "denied"


def test_the_store_decides_a_nested_review_once(tmp_path: Path) -> None:
    """``store.decide_reply`` takes the same review: one ``reply`` decision, the run ended answered."""
    paid: list[int] = []
    written: list[int] = []
    make_lead(paid, written).run("settle", store=SqliteStore(tmp_path / "runs.db"), run_id="job")
    done = decide_reply(SqliteStore(tmp_path / "runs.db"), "job", make_lead(paid, written), reviewer="ana", reply=WHOLE)
    assert done.stop is Stop.ANSWERED and paid == [5] and written == [7]
    [decision] = SqliteStore(tmp_path / "runs.db").history("job")
    assert decision.decision == "reply" and set(decision.arguments or {}) == set(WHOLE)


def test_two_levels_down_the_review_is_addressed_by_its_path_and_decided_in_one_step() -> None:
    """A top agent delegating to the lead (``t1``): the payer's calls are ``t1/n1/...``, decided with the rest."""
    paid: list[int] = []
    written: list[int] = []
    lead = make_lead(paid, written)
    top = Agent(
        ScriptedModel([_calls(("t1", "lead", {"task": "settle"})), answer_message("all settled")]),
        {"lead": lead.as_tool("Settle.")},
        gate=lambda call: Verdict("allow", "the lead's gate judges its own"),
        name="top",
    )
    paused = top.run("go")
    assert paused.blocked_path == ("t1", "n1", "c1")
    review = [c.call_id for c in top.reply_review(paused.state)]
    assert review == ["t1/n1/c1", "t1/n1/c2", "t1/n1/q3", "t1/w2"]
    done = top.resume(paused.state, reply={f"t1/{k}": v for k, v in WHOLE.items()})
    assert done.stop is Stop.ANSWERED and done.answer == "all settled"
    assert paid == [5] and written == [7]


def test_what_a_served_pause_asks_names_a_nested_calls_result_schema() -> None:
    """Serving's description of the pause lists each call of the review, a nested person's call with its schema."""
    pytest.importorskip("starlette")
    from agent_fsm.serve.core import asks

    lead = make_lead([], [])
    listed = asks(lead, lead.run("settle").state)["reply"]
    assert [c["call_id"] for c in listed] == list(WHOLE)
    assert listed[2]["result_schema"] == SIZE and "result_schema" not in listed[0]


def test_a_model_call_id_holding_a_slash_is_its_own_runs_call() -> None:
    """Ids the model sent (``w/1``) are not taken for nested addresses: the review decides them as the run's own."""
    written: list[int] = []
    tools = {"write": ToolSpec("Write n.", {"n": int}, lambda n: written.append(n) or "ok", effectful=True)}
    agent = Agent(
        ScriptedModel([_calls(("w/1", "write", {"n": 1}), ("w/2", "write", {"n": 2})), answer_message("done")]),
        tools,
        gate=lambda call: Verdict("ask", "writes need a person"),
    )
    paused = agent.run("write")
    assert [c.call_id for c in agent.reply_review(paused.state)] == ["w/1", "w/2"]
    done = agent.resume(paused.state, reply={"w/1": CallDecision.approved(), "w/2": CallDecision.rejected("no")})
    assert done.stop is Stop.ANSWERED and written == [1]
