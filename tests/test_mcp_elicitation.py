"""
MCP elicitation against the real npm server-everything: a server's question during a call pauses the run.

The server's ``trigger-elicitation-request`` tool sends ``elicitation/create``
(a form of thirteen fields, ``name`` required) and returns what it heard:
the content accepted, or that the person declined or cancelled. Nothing here
is a mock: the server is the published package (tests/mcp_servers).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_fsm import (
    Agent,
    AnswerRefused,
    Limits,
    RunState,
    ScriptedModel,
    Stop,
    Verdict,
    allow_all,
    answer_message,
    ask_for_effects,
    tool_call_message,
)
from agent_fsm.engine import ASKED, OpenQuestion, answered_by
from tests.test_mcp import _node_server

mcp = pytest.importorskip("mcp", reason="the MCP SDK is in the test extra: pip install -e '.[test]'")

from agent_fsm.mcp import MCPServer  # noqa: E402  (after the SDK's presence is known)
from agent_fsm.store import SqliteStore, answer, approve, reject  # noqa: E402
from agent_fsm.testing import answers, assert_run_invariants, invalid_answers  # noqa: E402

ELICIT = "trigger-elicitation-request"
ANA = {"name": "Ana", "check": True, "integer": 7}


def _server(*, elicitation: bool = True) -> MCPServer:
    node, index = _node_server()
    return MCPServer.stdio(node, [str(index), "stdio"], timeout=60, elicitation=elicitation)


@pytest.fixture(scope="module")
def everything() -> Iterator[MCPServer]:
    with _server() as server:
        yield server


def _agent(server: MCPServer, gate: Any = allow_all) -> Agent:
    script = [tool_call_message("c1", ELICIT, {}), answer_message("Thanks.")]
    return Agent(ScriptedModel(script), server.tools(allow=[ELICIT]), gate=gate, name="form")


def _said(result: Any) -> dict[str, Any]:
    """What the server says it heard: the raw elicitation result it quotes at the end of its answer."""
    observation = getattr(result, "state", result).observations[0]
    assert observation.kind == "result", observation
    raw: dict[str, Any] = json.loads(observation.content[-1].split("Raw result:", 1)[1])
    return raw


def test_a_servers_question_pauses_the_run_and_the_answer_goes_back(everything: MCPServer) -> None:
    """The call pauses with the server's message and schema; the answer reaches the server; its result is observed."""
    agent = _agent(everything)
    paused = agent.run("fill the form")
    assert paused.stop is Stop.AWAITING_APPROVAL and paused.blocked_on is not None
    assert paused.blocked_on.name == ELICIT
    assert ASKED in paused.reason and "Please provide inputs for the following fields" in paused.reason
    _call, question = answered_by(agent.tools, paused.state)
    assert isinstance(question, OpenQuestion)
    assert question.result["required"] == ["name"] and len(question.result["properties"]) == 13
    done = agent.resume(paused.state, answer=ANA)
    assert done.stop is Stop.ANSWERED
    assert _said(done) == {"action": "accept", "content": ANA}
    assert "- Name: Ana" in done.state.observations[0].content[1]


def test_a_wrong_answer_is_refused_to_the_person_and_the_call_stays_open(everything: MCPServer) -> None:
    """An answer breaking the server's schema is refused, typed, before anything is decided; a right one then goes."""
    agent = _agent(everything)
    paused = agent.run("fill the form")
    with pytest.raises(AnswerRefused) as refused:
        agent.resume(paused.state, answer={"name": 3, "integer": 500})
    assert refused.value.problems == [
        "integer: 500 is greater than the maximum of 100",
        "name: 3 is not of type 'string'",
    ]
    with pytest.raises(AnswerRefused, match="arguments cannot change"):
        agent.resume(paused.state, approve=True, arguments={"x": 1})
    assert not paused.state.consumed and answered_by(agent.tools, paused.state)[1] is not None
    assert _said(agent.resume(paused.state, answer={"name": "Bo"})) == {"action": "accept", "content": {"name": "Bo"}}


def test_a_state_that_is_not_the_runs_own_reaches_no_question(everything: MCPServer) -> None:
    """A copy of the paused state with another nonce cannot answer the open call; the run's own state can."""
    agent = _agent(everything)
    paused = agent.run("fill the form")
    forged = RunState.from_json(paused.state.to_json())
    forged.nonce = "0" * 32
    assert answered_by(agent.tools, forged)[1] is None
    with pytest.raises(AnswerRefused, match="no longer open here"):
        agent.resume(forged, answer=ANA)
    key = b"k" * 32
    signed = paused.state.to_json(key=key)
    # A signed pause whose text was changed (its question's reason, here) is refused.
    with pytest.raises(ValueError, match="signature does not match"):
        RunState.from_json(signed.replace("Please provide", "Please send"), key=key)
    saved = RunState.from_json(signed, key=key)  # the run's own state, signed, saved and loaded: still its question
    assert _said(agent.resume(saved, answer={"name": "Hal"})) == {"action": "accept", "content": {"name": "Hal"}}


def test_two_runs_paused_on_one_connection_are_answered_each_to_its_own_call(everything: MCPServer) -> None:
    """A question arriving while another call waits for its person belongs to the new call; replies do not cross."""
    first, second = _agent(everything), _agent(everything)
    one = first.run("form one")
    two = second.run("form two")
    assert one.stop is two.stop is Stop.AWAITING_APPROVAL
    assert _said(second.resume(two.state, answer={"name": "Two"})) == {"action": "accept", "content": {"name": "Two"}}
    assert _said(first.resume(one.state, approve=False, reason="no")) == {"action": "decline"}


def test_decline_and_cancel_reach_the_server_and_its_result_is_the_observation(everything: MCPServer) -> None:
    """A rejection is the person's decline, an approval with no answer a cancel: the call completes either way."""
    agent = _agent(everything)
    declined = agent.resume(agent.run("form").state, approve=False, reason="not my data to give")
    assert _said(declined) == {"action": "decline"}
    assert "declined" in declined.state.observations[0].content[0]
    agent = _agent(everything)
    cancelled = agent.resume(agent.run("form").state, approve=True)
    assert _said(cancelled) == {"action": "cancel"}


def test_the_call_that_asked_is_one_attempt_of_the_tool_budget(everything: MCPServer) -> None:
    """With one tool attempt allowed, the call that asked still completes: the pause spent no attempt of its own."""
    script = [tool_call_message("c1", ELICIT, {}), answer_message("Thanks.")]
    agent = Agent(
        ScriptedModel(script), everything.tools(allow=[ELICIT]), gate=allow_all, limits=Limits(max_tool_calls=1)
    )
    paused = agent.run("form")
    assert paused.state.tool_attempts == 0
    done = agent.resume(paused.state, answer={"name": "Gil"})
    assert _said(done) == {"action": "accept", "content": {"name": "Gil"}} and done.state.tool_attempts == 1


def test_async_driver_pauses_and_resumes_the_open_call(everything: MCPServer) -> None:
    """arun pauses on the server's question (the handler's thread returns); aresume's answer reaches the same call."""

    async def both() -> Any:
        agent = _agent(everything)
        paused = await agent.arun("form")
        assert paused.stop is Stop.AWAITING_APPROVAL
        return await agent.aresume(paused.state, answer={"name": "Cy"})

    assert _said(asyncio.run(both())) == {"action": "accept", "content": {"name": "Cy"}}


def test_the_capability_is_declared_only_when_asked() -> None:
    """Without elicitation=True the client does not declare the capability, and the server offers no eliciting tool."""
    with _server(elicitation=False) as plain:
        assert ELICIT not in plain.tools()
    with _server() as asking:
        assert ELICIT in asking.tools()


def test_a_temporal_worker_refuses_tools_that_ask_mid_call(everything: MCPServer) -> None:
    """A call on Temporal runs in one activity, which cannot stay open for a person: such tools are refused."""
    pytest.importorskip("temporalio", reason="Temporal is in the temporal extra")
    from agent_fsm.temporal import AgentDefinition

    with pytest.raises(ValueError, match=r"may ask a person in the middle of a call.*without elicitation"):
        AgentDefinition(_agent(everything))
    with _server(elicitation=False) as plain:
        AgentDefinition(Agent(ScriptedModel([answer_message("ok")]), dict(plain.tools(allow=["echo"])), name="p"))


def test_the_gate_judges_the_call_before_it_is_made_and_again_on_the_reply(everything: MCPServer) -> None:
    """The gate's own ask comes first (no answer taken there); a gate that now refuses withdraws the question."""
    tools = everything.tools(allow=[ELICIT])
    agent = _agent(everything, gate=ask_for_effects(tools))
    first = agent.run("form")
    assert first.stop is Stop.AWAITING_APPROVAL and ASKED not in first.reason  # the gate asked: nothing was sent
    with pytest.raises(AnswerRefused, match="not answered by a person"):
        agent.resume(first.state, answer=ANA)
    asked = agent.resume(first.state, approve=True)
    assert asked.stop is Stop.AWAITING_APPROVAL and ASKED in asked.reason
    _call, question = answered_by(agent.tools, asked.state)
    assert isinstance(question, OpenQuestion)

    refusing = _agent(everything, gate=lambda call: Verdict("deny", "forms are closed today"))
    done = refusing.resume(asked.state, answer=ANA)
    assert done.state.observations[0].kind == "denied" and "forms are closed" in done.state.observations[0].content
    assert question.reply.result(timeout=5) == ("cancel", None)  # the server was told no answer will come
    assert answered_by(agent.tools, asked.state)[1] is None  # and the call is no longer open here


def test_store_answer_in_process_records_who_answered(everything: MCPServer, tmp_path: Path) -> None:
    """Stored pauses answered, declined, cancelled through the store, in the process holding the call, by reviewer."""
    store = SqliteStore(tmp_path / "runs.db")
    agent = _agent(everything)
    paused = agent.run("form", store=store, run_id="form-1")
    assert store.load("form-1").summary.pause_id == paused.state.pause_id
    done = answer(store, "form-1", _agent(everything), reviewer="ana", answer={"name": "Ana"})
    assert _said(done) == {"action": "accept", "content": {"name": "Ana"}}
    [decision] = store.history("form-1")
    assert (decision.decision, decision.reviewer, decision.arguments) == ("answer", "ana", {"answer": {"name": "Ana"}})
    assert store.load("form-1").state.machine_state == "Answered"
    _agent(everything).run("form", store=store, run_id="form-1b")
    declined = reject(store, "form-1b", _agent(everything), reviewer="bo", reason="not mine to give")
    assert _said(declined) == {"action": "decline"}
    _agent(everything).run("form", store=store, run_id="form-1c")
    assert _said(approve(store, "form-1c", _agent(everything), reviewer="cy")) == {"action": "cancel"}
    assert [(d.decision, d.reviewer) for r in ("form-1b", "form-1c") for d in store.history(r)] == [
        ("reject", "bo"),
        ("approve", "cy"),
    ]


def test_the_inbox_in_the_same_process_shows_the_servers_form_and_answers(
    everything: MCPServer, tmp_path: Path
) -> None:
    """Over real HTTP: the run page's form is the server's schema; the answer is recorded and reaches the server."""
    import httpx

    from agent_fsm.store import open_store
    from agent_fsm.web import Reviewers, inbox_app
    from tests.test_web_inbox import _csrf, _signed_in
    from tests.web_server import serving

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with SqliteStore(tmp_path / "runs.db") as store:
        _agent(everything).run("form", store=store, run_id="form-3")
    reviewers = Reviewers.parse("ana:ana-token-0123456789")
    with serving(inbox_app(lambda: open_store(url), _agent(everything), reviewers=reviewers, wait=10)) as base:
        ana: httpx.Client = _signed_in(base, token="ana-token-0123456789")
        page = ana.get("/runs/form-3")
        assert 'name="answer.name"' in page.text and "Please provide inputs" in page.text
        assert 'id="cancel"' in page.text and 'id="reject"' in page.text and 'id="edit"' not in page.text
        pause = page.text.split('name="pause_id" value="', 1)[1].split('"', 1)[0]
        form = {"csrf": _csrf(page.text), "pause_id": pause, "action": "answer", "answer.name": "Ana"}
        refused = ana.post("/runs/form-3/decide", data={**form, "answer.integer": "500"})
        assert refused.status_code == 422 and "maximum" in refused.text
        done = ana.post("/runs/form-3/decide", data=form)
        assert done.status_code == 303, done.text[:500]
    with open_store(url) as store:
        [decision] = store.history("form-3")
        assert (decision.decision, decision.reviewer) == ("answer", "ana")
        stored = store.load("form-3")
    assert stored.status == "ended"
    assert '"name": "Ana"' in stored.state.observations[0].content[-1]


def test_served_over_http_the_question_is_answered_by_the_plain_api(everything: MCPServer, tmp_path: Path) -> None:
    """serve runs the agent in this process: its decision endpoint checks the answer and sends it to the server."""
    from agent_fsm.serve import serve_app
    from agent_fsm.store import open_store
    from tests.test_serve_api import CLIENTS, _client, _events
    from tests.web_server import serving

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    app = serve_app(_agent(everything), lambda: open_store(url), clients=CLIENTS, workers=2)
    with serving(app) as base, _client(base) as http:
        run_id = http.post("/runs", json={"task": "fill the form"}).json()["run_id"]
        rest = _events(http, run_id)[-1]
        assert rest["stop"] == "awaiting_approval" and ASKED in rest["reason"]
        wrong = {"decision": "answer", "pause_id": rest["pause_id"], "answer": {"name": 3}}
        refused = http.post(f"/runs/{run_id}/decision", json=wrong)
        assert refused.status_code == 422 and "is not of type 'string'" in refused.json()["error"]["message"]
        right = {"decision": "answer", "pause_id": rest["pause_id"], "answer": {"name": "Di"}}
        assert http.post(f"/runs/{run_id}/decision", json=right).status_code == 202
        assert _events(http, run_id, last=rest["id"])[-1]["stop"] == "answered"
    with open_store(url) as store:
        assert _said(store.load(run_id)) == {"action": "accept", "content": {"name": "Di"}}


def test_a_question_inside_a_nested_run_is_answered_at_the_top(everything: MCPServer) -> None:
    """The server's question in a run nested in a tool call pauses the top run; the answer goes down to the call."""
    outer = Agent(
        ScriptedModel([tool_call_message("o1", "form", {"task": "fill it"}), answer_message("Done.")]),
        {"form": _agent(everything).as_tool("Fill the form.")},
        gate=allow_all,
    )
    paused = outer.run("fill the form, through a helper")
    assert paused.stop is Stop.AWAITING_APPROVAL and ASKED in paused.reason
    assert isinstance(answered_by(outer.tools, paused.state)[1], OpenQuestion)
    done = outer.resume(paused.state, answer={"name": "Ed"})
    assert done.stop is Stop.ANSWERED and done.state.observations[0].content == "Thanks."
    assert _said(done.state.children["o1"]) == {"action": "accept", "content": {"name": "Ed"}}


def test_over_streamable_http_the_question_pauses_and_the_answer_goes_back() -> None:
    """The same server over Streamable HTTP on 127.0.0.1: the question arrives on the call's stream, the answer goes."""
    from tests.test_mcp import HERE, serving_http

    node, _ = _node_server()
    command = [node, "everything-http.mjs"]
    with serving_http(lambda port: (command, {**os.environ, "PORT": str(port)}), HERE) as url:
        server = MCPServer.http(url, timeout=60, elicitation=True)
        with server:
            agent = _agent(server)
            paused = agent.run("form")
            assert paused.stop is Stop.AWAITING_APPROVAL and ASKED in paused.reason
            done = agent.resume(paused.state, answer={"name": "Ivy"})
    assert _said(done) == {"action": "accept", "content": {"name": "Ivy"}}


def test_a_url_elicitation_is_declined(everything: MCPServer) -> None:
    """A server asking the person to open a web page is not carried: it is answered decline, and says so."""
    script = [
        tool_call_message("u1", "trigger-url-elicitation", {"url": "https://example.com/consent"}),
        answer_message("ok"),
    ]
    tools = everything.tools(allow=["trigger-url-elicitation"])
    result = Agent(ScriptedModel(script), tools, gate=allow_all).run("open the page")
    assert result.stop is Stop.ANSWERED
    assert _said(result) == {"action": "decline"}
    assert "declined to open the URL" in result.state.observations[0].content[0]


def _servers_running() -> set[int]:
    """The server-everything processes this test process started (its children)."""
    found = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "server-everything"], capture_output=True, text=True)
    return {int(pid) for pid in found.stdout.split()}


def test_a_closed_connection_ends_the_question_and_an_approval_asks_afresh() -> None:
    """Closing the server tells it cancel; the reopened server has no open call: answer refused, approval re-asks."""
    server = _server()
    with server:
        agent = _agent(server)
        paused = agent.run("form")
        question = answered_by(agent.tools, paused.state)[1]
        assert isinstance(question, OpenQuestion)
    assert question.reply.result(timeout=5) == ("cancel", None)
    with server:
        with pytest.raises(AnswerRefused, match="no longer open here"):
            agent.resume(paused.state, answer=ANA)
        again = agent.resume(paused.state, approve=True)
        assert again.stop is Stop.AWAITING_APPROVAL and ASKED in again.reason
        assert _said(agent.resume(again.state, answer={"name": "Flo"})) == {
            "action": "accept",
            "content": {"name": "Flo"},
        }


def test_a_server_that_dies_while_asking_leaves_the_outcome_unknown() -> None:
    """The server process killed during the question: an approval finds the call lost, and a person decides again."""
    import signal
    import time

    before = _servers_running()
    with _server() as server:
        agent = _agent(server)
        paused = agent.run("form")
        [started] = _servers_running() - before
        os.kill(started, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while answered_by(agent.tools, paused.state)[1] is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(AnswerRefused, match="outcome is unknown"):
            agent.resume(paused.state, answer=ANA)
        lost = agent.resume(paused.state, approve=True)
    assert lost.stop is Stop.AWAITING_APPROVAL and lost.reason.startswith("outcome unknown")
    assert lost.state.observations == []  # nothing is recorded as done or not done


_PAUSE_AND_DIE = """
import os, sys
from agent_fsm import Agent, ScriptedModel, allow_all, answer_message, tool_call_message
from agent_fsm.mcp import MCPServer
from agent_fsm.store import SqliteStore

node, index, db = sys.argv[1:4]
server = MCPServer.stdio(node, [index, "stdio"], timeout=60, elicitation=True).open()
script = [tool_call_message("c1", "trigger-elicitation-request", {}), answer_message("Thanks.")]
agent = Agent(ScriptedModel(script), server.tools(allow=["trigger-elicitation-request"]), gate=allow_all, name="form")
result = agent.run("fill the form", store=SqliteStore(db), run_id="form-2")
print(result.stop.value, flush=True)
os._exit(0)  # the process dies with the call open: nothing is closed, nothing is answered
"""
ENVIRONMENT = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}


def _paused_in_a_process_that_died(folder: Path) -> Path:
    """A SQLite store whose run form-2 paused on the server's question in a process that then died: its path."""
    node, index = _node_server()
    db = folder / "runs.db"
    died = subprocess.run(
        [sys.executable, "-c", _PAUSE_AND_DIE, node, str(index), str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENVIRONMENT,
    )
    assert died.stdout.strip() == "awaiting_approval", died.stderr[-2000:]
    return db


def test_resumed_after_a_restart_the_call_is_no_longer_open(tmp_path: Path) -> None:
    """Paused in a process that died: the answer is refused, outcome unknown; approval calls it again, same key."""
    db = _paused_in_a_process_that_died(tmp_path)
    store = SqliteStore(db)
    with _server() as server:
        with pytest.raises(AnswerRefused, match="no longer open here") as refused:
            answer(store, "form-2", _agent(server), reviewer="ana", answer=ANA)
        assert "outcome is unknown" in str(refused.value) and "same idempotency key" in str(refused.value)
        assert store.history("form-2") == []  # nothing was decided
        again = approve(store, "form-2", _agent(server), reviewer="ana")  # run again: the server asks afresh
        assert again.stop is Stop.AWAITING_APPROVAL and ASKED in again.reason
        done = answer(store, "form-2", _agent(server), reviewer="bo", answer={"name": "Bo"})
    assert _said(done) == {"action": "accept", "content": {"name": "Bo"}}
    assert [(d.decision, d.reviewer) for d in store.history("form-2")] == [("approve", "ana"), ("answer", "bo")]


def test_runs_answer_in_another_process_is_refused_and_decides_nothing(tmp_path: Path) -> None:
    """The command line is another process: the call is not open there, so `runs answer` refuses, typed, exit 1."""
    db = _paused_in_a_process_that_died(tmp_path)
    command = [sys.executable, "-m", "agent_fsm.cli", "runs", "answer", "form-2", "--store", f"sqlite:///{db}"]
    command += ["--world", "tests.elicit_world:world", "--reviewer", "ana", "--json", json.dumps(ANA)]
    said = subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENVIRONMENT)
    assert said.returncode != 0 and "no longer open here" in said.stderr + said.stdout, said.stderr[-2000:]
    assert SqliteStore(db).history("form-2") == []


def test_rejected_after_a_restart_the_call_is_recorded_as_not_run(tmp_path: Path) -> None:
    """A call no longer open, rejected: the model reads the refusal; nothing is sent to any server."""
    db = _paused_in_a_process_that_died(tmp_path)
    store = SqliteStore(db)
    with _server() as server:
        done = reject(store, "form-2", _agent(server), reviewer="ana", reason="the form went away")
    assert done.state.observations[0].kind == "denied" and "the form went away" in done.state.observations[0].content


@settings(
    max_examples=min(settings().max_examples, 50),  # each example is a real run against the server
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_decisions_drawn_against_the_servers_schema(everything: MCPServer, data: Any) -> None:
    """Answers the schema refuses decide nothing; an accepted answer, a decline or a cancel is what the server hears."""
    agent = _agent(everything)
    paused = agent.run("form")
    question = answered_by(agent.tools, paused.state)[1]
    assert isinstance(question, OpenQuestion)
    assert_run_invariants(paused, tools=agent.tools, gate=allow_all)
    wrong = data.draw(invalid_answers(question), label="wrong")
    with pytest.raises(AnswerRefused):
        agent.resume(paused.state, answer=wrong)
    assert not paused.state.consumed
    kind = data.draw(st.sampled_from(["accept", "decline", "cancel"]), label="kind")
    if kind == "accept":
        right = data.draw(answers(question), label="right")
        done, heard = agent.resume(paused.state, answer=right), {"action": "accept", "content": right}
    else:
        done, heard = agent.resume(paused.state, approve=kind == "cancel", reason="drawn"), {"action": kind}
    assert _said(done) == heard and done.stop is Stop.ANSWERED
    assert_run_invariants(done, tools=agent.tools, gate=allow_all)


def _reply_agent(server: MCPServer, calls: list[tuple[str, str]], *, ask_form: bool = False) -> Agent:
    """One reply of ``calls`` (id, tool): the server's form and a local write the gate asks a person about."""
    from agent_fsm import ToolSpec

    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": "{}" if n == ELICIT else '{"n": 1}'}}
            for i, n in calls
        ],
    }
    tools = {
        **server.tools(allow=[ELICIT]),
        "write": ToolSpec("Write n.", {"n": int}, lambda n: f"wrote {n}", effectful=True),
    }

    def gate(call: Any) -> Verdict:
        asks = call.name == "write" or (ask_form and call.name == ELICIT)
        return Verdict("ask", "a person decides") if asks else Verdict("allow", "ok")

    return Agent(ScriptedModel([message, answer_message("done")]), tools, gate=gate, name="reply")


def test_a_reply_whose_open_question_is_its_first_call_is_decided_whole(everything: MCPServer) -> None:
    """The server's question heads the reply: one review answers it and approves the write after it."""
    from agent_fsm import CallDecision
    from agent_fsm.engine import reply_strands
    from agent_fsm.serve.core import asks

    agent = _reply_agent(everything, [("e1", ELICIT), ("w1", "write")])
    paused = agent.run("form, then write")
    assert ASKED in paused.reason and [c.call_id for c in agent.reply_review(paused.state)] == ["e1", "w1"]
    assert reply_strands(agent, paused.state) is None and "reply" in asks(agent, paused.state)["decisions"]
    done = agent.resume(
        paused.state, reply={"e1": CallDecision.answered({"name": "Ana"}), "w1": CallDecision.approved()}
    )
    assert done.stop is Stop.ANSWERED and _said(done) == {"action": "accept", "content": {"name": "Ana"}}
    assert [(o.call_id, o.kind) for o in done.state.observations] == [("e1", "result"), ("w1", "result")]


@pytest.mark.parametrize(
    ("calls", "ask_form"),
    [([("w1", "write"), ("e1", ELICIT), ("w2", "write")], False), ([("e1", ELICIT), ("w1", "write")], True)],
    ids=["form-between-reviewed-calls", "form-reviewed-before-it-asks"],
)
def test_a_reply_with_a_call_that_may_ask_before_a_later_decided_call_is_refused(
    everything: MCPServer, calls: list[tuple[str, str]], ask_form: bool
) -> None:
    """A call whose server may ask mid-call would pause the run before later decisions apply: refused, typed."""
    from agent_fsm import CallDecision
    from agent_fsm.engine import DecisionRefused, reply_strands
    from agent_fsm.serve.core import asks

    agent = _reply_agent(everything, calls, ask_form=ask_form)
    paused = agent.run("write, form, write")
    review = [c.call_id for c in agent.reply_review(paused.state)]
    assert len(review) == 2 and ASKED not in paused.reason
    with pytest.raises(DecisionRefused, match="may ask a person mid-call") as refused:
        agent.resume(paused.state, reply={i: CallDecision.rejected("no") for i in review})
    assert refused.value.kind == "MayAskMidCall" and "one at a time" in str(refused.value)
    assert not paused.state.consumed
    asked_of = asks(agent, paused.state)  # what every served protocol offers: no whole review, and why
    assert "reply" not in asked_of["decisions"] and "reply" not in asked_of
    assert asked_of["reply_refused"] == reply_strands(agent, paused.state) == str(refused.value)
    asked = agent.resume(paused.state, approve=True)  # one at a time: the form asks, then the last write waits
    asked = asked if ASKED in asked.reason else agent.resume(asked.state, approve=True)
    assert ASKED in asked.reason
    last = agent.resume(asked.state, answer={"name": "Ana"})
    assert last.stop is Stop.AWAITING_APPROVAL and last.blocked_on is not None and last.blocked_on.name == "write"
    assert agent.resume(last.state, approve=False, reason="no").stop is Stop.ANSWERED


def test_the_inbox_offers_a_whole_review_only_where_it_would_be_taken(everything: MCPServer, tmp_path: Path) -> None:
    """Over real HTTP: the run page lists the review when the question heads the reply, not when a call may ask."""
    from agent_fsm.store import open_store
    from agent_fsm.web import Reviewers, inbox_app
    from tests.test_web_inbox import _signed_in
    from tests.web_server import serving

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    heads = _reply_agent(everything, [("e1", ELICIT), ("w1", "write")])
    strands = _reply_agent(everything, [("w1", "write"), ("e1", ELICIT), ("w2", "write")])
    with SqliteStore(tmp_path / "runs.db") as store:
        asked = heads.run("form, then write", store=store, run_id="heads")
        strands.run("write, form, write", store=store, run_id="strands")
    reviewers = Reviewers.parse("ana:ana-token-0123456789")
    for agent, run_id, offered in ((heads, "heads", True), (strands, "strands", False)):
        with serving(inbox_app(lambda: open_store(url), agent, reviewers=reviewers, wait=10)) as base:
            page = _signed_in(base, token="ana-token-0123456789").get(f"/runs/{run_id}").text
        assert ('id="review"' in page) is offered, run_id
    assert heads.resume(asked.state, answer={"name": "Ana"}).stop is Stop.AWAITING_APPROVAL  # the question closed
