"""
AG-UI 1.0 through the official client: ``@ag-ui/client``'s HttpAgent, run by Node, against a live server.

The client validates every event it receives (order, open messages, steps,
the run's finish), so a run it accepts to the end is a run spoken in AG-UI as
the client reads it. A pause ends an AG-UI run with an interrupt; the client's
next run resumes it with a decision, judged afresh by the agent's gate.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from agent_fsm import Limits
from agent_fsm.serve import Clients, serve_app
from agent_fsm.store import open_store
from tests.ledger_world import ledger_agent, read_ledger, task_for
from tests.person_world import SIZE
from tests.serve_process import served_ledger, served_shop
from tests.system_parts import unavailable
from tests.web_server import serving

HERE = Path(__file__).parent / "ag_ui"
UI = "ui-token-0123456789abcdef"
STARTER = "starter-token-0123456789"
CLIENTS = Clients.parse(f"ui:{UI}:start+read+decide starter:{STARTER}:start+read")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The ledger agent served on 127.0.0.1 over a SQLite file: (base URL, ledger)."""
    with served_ledger(tmp_path, CLIENTS) as got:
        yield got


def drive(base: str, task: str, decision: str | None = None, token: str = UI) -> dict[str, Any]:
    """What the official client received running ``task`` (and resuming its interrupt with ``decision``)."""
    node = shutil.which("node")
    if node is None or not (HERE / "node_modules" / "@ag-ui" / "client").is_dir():
        unavailable("the AG-UI client is not installed: run `npm ci` in tests/ag_ui (.ci/run does)")
    command = [node, "drive.mjs", base, token, task, *([decision] if decision else [])]
    done = subprocess.run(command, cwd=HERE, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _paid(ledger: Path) -> list[dict[str, Any]]:
    return [e["args"] for e in read_ledger(ledger) if e["event"] == "effect" and e["tool"] == "pay"]


def test_a_run_streams_to_its_answer_through_the_official_client(served: tuple[str, Path]) -> None:
    """The client accepts every event; steps, tool calls, results, the answer and the budgets spent all arrive."""
    base, ledger = served
    report = drive(base, task_for(["A-1", "A-2"]))
    assert "error" not in report, report.get("error")
    types = [e["type"] for e in report["events"]]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED" and types.count("RUN_FINISHED") == 1
    for kind in ("STEP_STARTED", "STEP_FINISHED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"):
        assert kind in types, kind
    assert types.count("TOOL_CALL_RESULT") == 6  # lookup, pay, receipt for each invoice
    [run] = report["runs"]
    assert run["result"] == {"stop": "answered", "code": "answered", "answer": "Handled 2 invoices."}
    said = [m for m in report["messages"] if m["role"] == "assistant" and m.get("content")]
    assert said[-1]["content"] == "Handled 2 invoices."
    called = [c["function"]["name"] for m in report["messages"] for c in m.get("toolCalls", [])]
    assert called == ["lookup", "pay", "send_receipt"] * 2
    assert report["state"]["spent"]["model_calls"] == 7
    assert [p["invoice"] for p in _paid(ledger)] == ["A-1", "A-2"]


def test_a_pause_is_an_interrupt_and_the_client_resume_decides_it(served: tuple[str, Path]) -> None:
    """The gated payment ends the first AG-UI run with an interrupt; resuming it with approve pays exactly once."""
    base, ledger = served
    report = drive(base, task_for(["BIG-1"]), json.dumps({"decision": "approve"}))
    assert "error" not in report, report.get("error")
    first, second = report["runs"]
    [interrupt] = first["interrupts"]
    assert interrupt["reason"] == "approval" and interrupt["toolCallId"]
    assert interrupt["metadata"]["agent_fsm"]["call"]["name"] == "pay"
    assert second["interrupts"] == [] and second["result"]["stop"] == "answered"
    types = [e["type"] for e in report["events"]]
    assert types.count("RUN_STARTED") == 2 and types.count("RUN_FINISHED") == 2
    assert [p["invoice"] for p in _paid(ledger)] == ["BIG-1"]


def test_an_edit_through_resume_is_judged_by_the_contract(served: tuple[str, Path]) -> None:
    """An edit breaking the tool's contract is refused (the client sees a 422) and nothing is paid."""
    base, ledger = served
    bad = {"decision": "edit", "arguments": {"invoice": "BIG-2", "cents": "lots"}}
    report = drive(base, task_for(["BIG-2"]), json.dumps(bad))
    assert report["error"]["status"] == 422 and "decision_refused" in report["error"]["message"]
    assert _paid(ledger) == []


def test_a_cancelled_interrupt_rejects_the_call(served: tuple[str, Path]) -> None:
    """Cancelling the interrupt rejects the call: the run goes on without paying."""
    base, ledger = served
    report = drive(base, task_for(["BIG-3"]), "cancel")
    assert "error" not in report, report.get("error")
    assert report["runs"][1]["interrupts"] == []
    assert _paid(ledger) == []


def test_a_cancel_decision_through_resume_ends_the_run_cancelled(served: tuple[str, Path]) -> None:
    """A resume payload ``{"decision": "cancel"}`` ends the run ``cancelled``: a RUN_ERROR coded so, nothing paid."""
    base, ledger = served
    report = drive(base, task_for(["BIG-5"]), json.dumps({"decision": "cancel", "reason": "not today"}))
    assert report["runs"][0]["interrupts"]
    errors = [e for e in report["events"] if e["type"] == "RUN_ERROR"]
    assert [e["code"] for e in errors] == ["cancelled"] and "cancelled by ui: not today" in errors[0]["message"]
    assert _paid(ledger) == []


def test_a_token_without_decide_cannot_resume(served: tuple[str, Path]) -> None:
    """A client allowed to start but not to decide gets its interrupt, and a 403 when it tries to resume it."""
    base, ledger = served
    report = drive(base, task_for(["BIG-4"]), json.dumps({"decision": "approve"}), token=STARTER)
    assert report["runs"][0]["interrupts"] and report["error"]["status"] == 403
    assert _paid(ledger) == []


def test_client_declared_tools_are_refused(served: tuple[str, Path]) -> None:
    """A RunAgentInput declaring tools is a typed 422: a client tool is an effect the gate never judged."""
    base, _ = served
    given = {
        "threadId": "t",
        "runId": "r",
        "messages": [{"id": "u", "role": "user", "content": task_for(["A-1"])}],
        "tools": [{"name": "wire_money", "description": "moves money", "parameters": {"type": "object"}}],
    }
    answer = httpx.post(base + "/ag-ui", json=given, headers={"authorization": f"Bearer {UI}"}, timeout=10)
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "client_tools_refused"
    resume = {**given, "tools": [], "resume": [{"interruptId": "other.abc|other.abc.1", "status": "resolved"}]}
    answer = httpx.post(base + "/ag-ui", json=resume, headers={"authorization": f"Bearer {UI}"}, timeout=10)
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "no_such_interrupt"


def test_a_typed_stop_without_an_answer_is_a_run_error_with_its_code(tmp_path: Path) -> None:
    """A run stopped by its step budget reaches the client as RUN_ERROR whose code is the run's (``step_limit``)."""
    agent = attrs.evolve(ledger_agent(tmp_path / "ledger.jsonl"), limits=Limits(max_turns=1))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with serving(serve_app(agent, lambda: open_store(url), clients=CLIENTS)) as base:
        report = drive(base, task_for(["A-1", "A-2"]))
    errors = [e for e in report["events"] if e["type"] == "RUN_ERROR"]
    assert [e["code"] for e in errors] == ["step_limit"] and report["events"][-1] == errors[0]
    assert "RUN_FINISHED" not in [e["type"] for e in report["events"]]


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[str]:
    """The shop whose question a person answers, served on 127.0.0.1 over a SQLite file: its base URL."""
    with served_shop(tmp_path, CLIENTS) as (base, _):
        yield base


def test_a_question_is_an_interrupt_carrying_its_schema_and_the_resume_answers_it(shop: str) -> None:
    """The interrupt names the question and the schema an answer must meet; the resume's answer is the call's result."""
    report = drive(shop, "order a shirt", json.dumps({"decision": "answer", "answer": {"size": "L"}}))
    assert "error" not in report, report.get("error")
    first, second = report["runs"]
    [interrupt] = first["interrupts"]
    asks = interrupt["metadata"]["agent_fsm"]
    assert interrupt["reason"] == "input" and asks["question"] == {"question": "Size?"}
    assert asks["result_schema"] == SIZE and asks["decisions"] == ["answer", "reject", "cancel"]
    assert interrupt["responseSchema"]["properties"]["answer"] == SIZE
    assert second["result"]["stop"] == "answered" and '"size": "L"' in second["result"]["answer"]


def test_a_wrong_answer_through_resume_is_refused(shop: str) -> None:
    """An answer breaking the result schema is a 422 the client sees; the run stays paused."""
    report = drive(shop, "order a shirt", json.dumps({"decision": "answer", "answer": {"size": "XL"}}))
    assert report["error"]["status"] == 422 and "is not one of" in report["error"]["message"]


def test_a_whole_reply_through_resume_decides_every_call(shop: str, tmp_path: Path) -> None:
    """A reply of a write and a question: the interrupt lists both; one resume decides them together."""
    reply = {"w1": {"approve": True}, "q1": {"answer": {"size": "S"}}}
    report = drive(shop, "both, please", json.dumps({"decision": "reply", "reply": reply}))
    assert "error" not in report, report.get("error")
    [interrupt] = report["runs"][0]["interrupts"]
    review = interrupt["metadata"]["agent_fsm"]["reply"]
    assert [c["call_id"] for c in review] == ["w1", "q1"] and review[1]["result_schema"] == SIZE
    assert report["runs"][1]["result"]["stop"] == "answered"
    assert (tmp_path / "written.txt").read_text() == "1\n"


def test_an_mcp_servers_question_is_an_interrupt_and_the_resume_answers_or_declines_it(tmp_path: Path) -> None:
    """
    A served agent whose MCP tool asks mid-call (the npm server-everything, in this process): the interrupt
    carries the server's message and schema; the resume's answer, or its rejection (a decline), reaches the
    server, and the call completes with the server's result.
    """
    pytest.importorskip("mcp", reason="the MCP SDK is in the test extra: pip install -e '.[test]'")
    from agent_fsm.engine import ASKED
    from tests.test_mcp_elicitation import _agent, _said, _server

    heard = []
    with _server() as everything:
        for n, decision in enumerate(
            (
                {"decision": "answer", "answer": {"name": "Ana", "integer": 7}},
                {"decision": "reject", "reason": "not mine to give"},
            )
        ):
            url = f"sqlite:///{tmp_path / f'runs-{n}.db'}"  # a store each: one AG-UI thread, one conversation
            app = serve_app(_agent(everything), lambda url=url: open_store(url), clients=CLIENTS, workers=2)
            with serving(app) as base:
                report = drive(base, "fill the form", json.dumps(decision))
            assert "error" not in report, report.get("error")
            first, second = report["runs"]
            [interrupt] = first["interrupts"]
            asks = interrupt["metadata"]["agent_fsm"]
            assert interrupt["reason"] == "input" and ASKED in interrupt["message"]
            assert "Please provide inputs" in interrupt["message"]
            assert asks["result_schema"]["required"] == ["name"] and len(asks["result_schema"]["properties"]) == 13
            assert asks["decisions"] == ["answer", "reject", "cancel"]
            response = interrupt["responseSchema"]  # the protocol's own field: what a resume payload may hold
            assert response["properties"]["answer"] == asks["result_schema"]
            assert response["properties"]["decision"] == {"enum": asks["decisions"]}
            assert second["interrupts"] == [] and second["result"]["stop"] == "answered"
            with open_store(url) as store:
                heard.append(_said(store.load(asks["run_id"])))
    assert heard == [{"action": "accept", "content": {"name": "Ana", "integer": 7}}, {"action": "decline"}]
