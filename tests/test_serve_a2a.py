"""
A2A 1.0 through the official ``a2a-sdk`` client against a live server: the card, send, stream, input-required, decide.

The client reads the agent card, picks the JSON-RPC interface it names, and
parses every answer into the protocol's own types, so what it accepts is A2A
as the SDK speaks it. A pause is a task waiting for input; the next message
to the task decides it, judged afresh by the agent's gate.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_fsm import Agent
from agent_fsm.serve import Clients, serve_app
from agent_fsm.store import open_store
from tests.ledger_world import LedgerModel, ledger_tools, pay_gate, read_ledger, task_for
from tests.person_world import SIZE
from tests.serve_process import served_ledger, served_shop
from tests.web_server import serving

a2a_client = pytest.importorskip("a2a.client")
a2a_types = pytest.importorskip("a2a.types.a2a_pb2")
json_format = pytest.importorskip("google.protobuf.json_format")

UI = "ui-token-0123456789abcdef"
OTHER = "other-token-0123456789ab"
CLIENTS = Clients.parse(f"ui:{UI}:start+read+decide other:{OTHER}:start+read+decide")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The ledger agent served on 127.0.0.1 over a SQLite file: (base URL, ledger)."""
    with served_ledger(tmp_path, CLIENTS) as got:
        yield got


def _paid(ledger: Path) -> list[dict[str, Any]]:
    return [e["args"] for e in read_ledger(ledger) if e["event"] == "effect" and e["tool"] == "pay"]


def _message(text: str = "", task_id: str = "", data: dict[str, Any] | None = None) -> Any:
    parts = [a2a_types.Part(text=text)] if text else []
    if data is not None:
        part = a2a_types.Part()
        part.data.struct_value.update(data)
        parts.append(part)
    message = a2a_types.Message(message_id=f"m-{text[:8]}", role=a2a_types.Role.ROLE_USER, parts=parts, task_id=task_id)
    return a2a_types.SendMessageRequest(message=message)


@contextlib.asynccontextmanager
async def _connected(base: str, token: str = UI, streaming: bool = False) -> AsyncIterator[tuple[Any, Any]]:
    """An HTTP client with ``token`` and the SDK's client made from the server's card: (http, client)."""
    async with httpx.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30) as http:
        card = await a2a_client.A2ACardResolver(http, base).get_agent_card()
        config = a2a_client.ClientConfig(httpx_client=http, streaming=streaming)
        yield http, a2a_client.ClientFactory(config).create(card)


async def _paused(client: Any, invoice: str) -> tuple[str, str]:
    """A task paying ``invoice`` sent (not streamed): its id, and its state as GetTask reads it."""
    [event] = [e async for e in client.send_message(_message(task_for([invoice])))]
    got = await client.get_task(a2a_types.GetTaskRequest(id=event.task.id))
    return event.task.id, a2a_types.TaskState.Name(got.status.state)


async def _talk(base: str, token: str, streaming: bool, *steps: Any) -> list[list[dict[str, Any]]]:
    """Send each step (a request, or a function of the last task id to one); what came back to each, as dicts."""
    said: list[list[dict[str, Any]]] = []
    async with _connected(base, token, streaming) as (_, client):
        task_id = ""
        for step in steps:
            request = step(task_id) if callable(step) else step
            got = [json_format.MessageToDict(event) async for event in client.send_message(request)]
            first = got[0]
            task_id = first["task"]["id"] if "task" in first else first["statusUpdate"]["taskId"]
            said.append(got)
    return said


def _states(events: list[dict[str, Any]]) -> list[str]:
    return [(e.get("task") or e.get("statusUpdate", {})).get("status", {}).get("state", "") for e in events]


def test_the_card_names_the_json_rpc_interface(served: tuple[str, Path]) -> None:
    """The agent card is public, streams, and points at this server's JSON-RPC endpoint."""
    base, _ = served

    async def card() -> Any:
        async with httpx.AsyncClient(timeout=10) as http:
            return await a2a_client.A2ACardResolver(http, base).get_agent_card()

    got = asyncio.run(card())
    assert got.capabilities.streaming
    [interface] = got.supported_interfaces
    assert interface.url == f"{base}/a2a" and interface.protocol_binding == "JSONRPC"


def test_a_streamed_task_pauses_for_input_and_the_next_message_decides_it(served: tuple[str, Path]) -> None:
    """Streamed: working, then input-required naming the call; 'approve' to the task completes it, paid once."""
    base, ledger = served
    first, second = asyncio.run(
        _talk(base, UI, True, _message(task_for(["BIG-1"])), lambda task: _message("approve", task))
    )
    assert _states(first)[0] == "TASK_STATE_WORKING" and _states(first)[-1] == "TASK_STATE_INPUT_REQUIRED"
    pause = first[-1]["statusUpdate"]["status"]["message"]["parts"][1]["data"]
    assert pause["call"]["name"] == "pay" and pause["decisions"] == ["approve", "edit", "reject", "cancel"]
    assert _states(second)[-1] == "TASK_STATE_COMPLETED", second
    artifacts = [e["artifactUpdate"]["artifact"] for e in second if "artifactUpdate" in e]
    assert artifacts[0]["parts"] == [{"text": "Handled 1 invoices."}]
    assert [p["invoice"] for p in _paid(ledger)] == ["BIG-1"]


def test_a_sent_task_answers_when_it_rests_and_a_rejection_goes_on_unpaid(served: tuple[str, Path]) -> None:
    """Not streamed: the task comes back input-required; a rejection as a data part completes it without paying."""
    base, ledger = served
    reject = {"decision": "reject", "reason": "not this month"}
    first, second = asyncio.run(
        _talk(base, UI, False, _message(task_for(["BIG-2"])), lambda task: _message(task_id=task, data=reject))
    )
    assert [e["task"]["status"]["state"] for e in first] == ["TASK_STATE_INPUT_REQUIRED"]
    assert second[0]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert _paid(ledger) == []


def test_get_cancel_and_refusals_are_the_protocol_errors(served: tuple[str, Path]) -> None:
    """GetTask reads the task; another client's task and a broken edit are A2A's typed errors."""
    base, ledger = served

    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with _connected(base) as (_, client):
            task_id, out["state"] = await _paused(client, "BIG-3")
            for name, call in (
                ("edit", _drain(client.send_message(_message(task_id=task_id, data=_BAD_EDIT)))),
                ("garbled", _drain(client.send_message(_message("pay it twice", task_id)))),
            ):
                try:
                    await call
                except Exception as exc:
                    out[name] = type(exc).__name__
        async with _connected(base, OTHER) as (_, other):
            try:
                await other.get_task(a2a_types.GetTaskRequest(id=task_id))
            except Exception as exc:
                out["other"] = type(exc).__name__
        return out

    out = asyncio.run(scenario())
    assert out == {
        "state": "TASK_STATE_INPUT_REQUIRED",
        "edit": "InvalidParamsError",
        "garbled": "InvalidParamsError",
        "other": "TaskNotFoundError",
    }
    assert _paid(ledger) == []


_BAD_EDIT = {"decision": "edit", "arguments": {"invoice": "BIG-3", "cents": "lots"}}


async def _drain(events: Any) -> None:
    async for _ in events:
        pass


def test_a2a_without_a_token_is_refused(served: tuple[str, Path]) -> None:
    """The JSON-RPC endpoint answers a typed 401 without a known bearer token."""
    base, _ = served
    answer = httpx.post(base + "/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}}, timeout=10)
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthenticated"


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[str]:
    """The shop whose question a person answers, served on 127.0.0.1 over a SQLite file: its base URL."""
    with served_shop(tmp_path, CLIENTS) as (base, _):
        yield base


def test_input_required_carries_the_question_and_the_next_message_answers_it(shop: str) -> None:
    """The pause's data part has the question and the result schema; an answer data part completes the task."""
    answer = {"decision": "answer", "answer": {"size": "M"}}
    first, second = asyncio.run(
        _talk(shop, UI, True, _message("order a shirt"), lambda task: _message(task_id=task, data=answer))
    )
    pause = first[-1]["statusUpdate"]["status"]["message"]["parts"][1]["data"]
    assert pause["question"] == {"question": "Size?"} and pause["result_schema"] == SIZE
    assert pause["decisions"] == ["answer", "reject", "cancel"]
    assert _states(second)[-1] == "TASK_STATE_COMPLETED", second
    artifacts = [e["artifactUpdate"]["artifact"] for e in second if "artifactUpdate" in e]
    assert '"size": "M"' in artifacts[0]["parts"][0]["text"]


def test_a_wrong_answer_or_a_whole_reply_by_message(shop: str, tmp_path: Path) -> None:
    """
    A wrong answer is InvalidParams with the pause still open; a whole reply decides both calls of the reply.

    The edit's integer arrives as the double a protobuf Struct holds (3.0) and is taken as the integer it is.
    """
    wrong = {"decision": "answer", "answer": {"size": "XL"}}
    reply = {"decision": "reply", "reply": {"w1": {"arguments": {"n": 3}}, "q1": {"answer": {"size": "S"}}}}

    async def talk() -> tuple[Any, list[list[dict[str, Any]]]]:
        [[paused]] = await _talk(shop, UI, False, _message("both, please"))
        task = paused["task"]["id"]
        try:
            await _talk(shop, UI, False, _message(task_id=task, data=wrong))
        except Exception as exc:  # the SDK raises the JSON-RPC error
            refused: Any = exc
        else:
            refused = None
        return refused, [[paused], *await _talk(shop, UI, False, _message(task_id=task, data=reply))]

    refused, ((paused,), (done,)) = asyncio.run(talk())
    data = paused["task"]["status"]["message"]["parts"][1]["data"]
    assert [c["call_id"] for c in data["reply"]] == ["w1", "q1"] and "reply" in data["decisions"]
    assert refused is not None and "decision_refused" in str(refused)
    assert done["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert (tmp_path / "written.txt").read_text() == "3\n"


def test_a_task_waiting_for_input_is_cancelled_and_the_run_ends_cancelled(served: tuple[str, Path]) -> None:
    """
    CancelTask on an input-required task ends the run in its own typed ending, ``cancelled``: canceled, nothing
    paid, the waiting call answered as not run, the model's budget untouched and not called again, who
    cancelled recorded; cancelling it again is TaskNotCancelableError.
    """
    base, ledger = served

    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with _connected(base) as (http, client):
            task_id, _ = await _paused(client, "BIG-5")
            out["task_id"] = task_id
            cancelled = await client.cancel_task(a2a_types.CancelTaskRequest(id=task_id))
            out["cancelled"] = a2a_types.TaskState.Name(cancelled.status.state)
            got = await client.get_task(a2a_types.GetTaskRequest(id=task_id))
            out["read"] = a2a_types.TaskState.Name(got.status.state)
            out["said"] = json_format.MessageToDict(got.status.message)["parts"][1]["data"]
            try:
                await client.cancel_task(a2a_types.CancelTaskRequest(id=task_id))
            except Exception as exc:
                out["again"] = type(exc).__name__
            out["read_http"] = (await http.get(f"{base}/runs/{task_id}")).json()
        return out

    out = asyncio.run(scenario())
    assert out["cancelled"] == out["read"] == "TASK_STATE_CANCELED"
    assert out["said"]["stop"] == "cancelled" and out["said"]["cancelled_by"] == "ui"
    assert out["again"] == "TaskNotCancelableError"
    assert out["read_http"]["status"] == "ended" and out["read_http"]["stop"] == "cancelled"
    assert [e for e in read_ledger(ledger) if e["event"] == "effect"] == []
    stored = open_store(f"sqlite:///{ledger.parent / 'runs.db'}").load(out["task_id"])
    last = stored.state.messages[-1]
    assert last["role"] == "tool" and json.loads(last["content"])["content"].startswith("not run: cancelled by ui")
    assert stored.state.limits is not None and stored.state.limits.max_turns != stored.state.turns
    assert [d.decision for d in open_store(f"sqlite:///{ledger.parent / 'runs.db'}").history(out["task_id"])] == [
        "cancel"
    ]


class _SlowLedger(LedgerModel):
    """The ledger's model taking a second a reply: a run stays working long enough to be asked to cancel."""

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        time.sleep(1.0)
        return super().chat(messages, tools)


def test_a_running_task_is_not_cancelable(tmp_path: Path) -> None:
    """A task whose run is working answers TaskNotCancelableError: a run is not stopped between its steps."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = Agent(_SlowLedger(), ledger_tools(tmp_path / "ledger.jsonl"), gate=pay_gate)

    async def cancel(base: str, task_id: str) -> str:
        async with _connected(base) as (_, client):
            try:
                await client.cancel_task(a2a_types.CancelTaskRequest(id=task_id))
            except Exception as exc:
                return type(exc).__name__
            return "cancelled"

    with serving(serve_app(agent, lambda: open_store(url), clients=CLIENTS)) as base:
        started = httpx.post(
            f"{base}/runs", json={"task": task_for(["A-1"])}, headers={"authorization": f"Bearer {UI}"}, timeout=10
        )
        task_id = started.json()["run_id"]
        assert asyncio.run(cancel(base, task_id)) == "TaskNotCancelableError"


def test_an_mcp_servers_question_is_input_required_and_the_next_message_answers_or_declines_it(
    tmp_path: Path,
) -> None:
    """
    A served agent whose MCP tool asks mid-call (the npm server-everything, in this process): input-required
    carries the server's message and schema; the next message's answer, or its rejection (a decline), reaches
    the server, and the task completes with the server's result.
    """
    pytest.importorskip("mcp", reason="the MCP SDK is in the test extra: pip install -e '.[test]'")
    from agent_fsm.engine import ASKED
    from tests.test_mcp_elicitation import _agent, _said, _server

    answer = {"decision": "answer", "answer": {"name": "Ana", "check": True}}
    decline = {"decision": "reject", "reason": "not mine to give"}
    heard = []
    with _server() as everything:
        for n, (streaming, decision) in enumerate([(True, answer), (False, decline)]):
            url = f"sqlite:///{tmp_path / f'runs-{n}.db'}"
            app = serve_app(_agent(everything), lambda url=url: open_store(url), clients=CLIENTS, workers=2)
            with serving(app) as base:
                first, second = asyncio.run(
                    _talk(
                        base,
                        UI,
                        streaming,
                        _message("fill the form"),
                        lambda t, d=decision: _message(task_id=t, data=d),
                    )
                )
            assert _states(first)[-1] == "TASK_STATE_INPUT_REQUIRED"
            status = (first[-1].get("task") or first[-1]["statusUpdate"])["status"]
            said, data = status["message"]["parts"][0]["text"], status["message"]["parts"][1]["data"]
            assert ASKED in said and "Please provide inputs" in said
            assert data["result_schema"]["required"] == ["name"] and len(data["result_schema"]["properties"]) == 13
            assert (
                data["decisions"] == ["answer", "reject", "cancel"]
                and data["call"]["name"] == "trigger-elicitation-request"
            )
            assert _states(second)[-1] == "TASK_STATE_COMPLETED", second
            task = first[-1]["task"]["id"] if "task" in first[-1] else first[-1]["statusUpdate"]["taskId"]
            with open_store(url) as store:  # the task is the run
                heard.append(_said(store.load(task)))
    assert heard == [{"action": "accept", "content": {"name": "Ana", "check": True}}, {"action": "decline"}]
