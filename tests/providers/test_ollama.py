"""OllamaChat: object arguments, synthesized ids and tool_name, against a loopback /api/chat."""

from __future__ import annotations

import json

import pytest

from agent_fsm import Stop, run
from agent_fsm.examples.support_desk import refund_gate
from agent_fsm.providers import OllamaChat

from .loopback import DROP, json_reply, ollama_reply

TASK = "My order A-17 came broken. What had I paid?"


def _call(name: str, arguments: object) -> dict:
    return {"function": {"name": name, "arguments": arguments}}


def _model(server, sleeps, **options) -> OllamaChat:
    options.setdefault("read_timeout", 2.0)
    return OllamaChat(base_url=server.url, model="llama3.2", sleep=sleeps.append, **options)


def test_tool_call_then_answer_with_synthesized_ids(server, sleeps, desk):
    """Calls without ids get ollama_<n>_<i>; the result goes back with tool_name; prompt_eval_count is used."""
    server.script(
        ollama_reply({"tool_calls": [_call("lookup_order", {"order_id": "A-17"}), _call("read_policy", {})]}, 150),
        ollama_reply({"content": "You paid 4999 cents."}, 260),
    )
    result = run(TASK, _model(server, sleeps, options={"num_ctx": 8192}, temperature=0), desk.tools, gate=refund_gate)
    assert result.stop is Stop.ANSWERED
    assert [o.call_id for o in result.state.observations] == ["ollama_0_0", "ollama_0_1"]
    assert result.state.prompt_token_log == [150, 260]
    first, second = server.requests
    assert first.path == "/api/chat"
    assert first.body["stream"] is False
    assert first.body["options"] == {"num_ctx": 8192, "temperature": 0}
    sent = second.body["messages"]
    assert sent[2]["tool_calls"][0] == {"function": {"name": "lookup_order", "arguments": {"order_id": "A-17"}}}
    assert [(m["role"], m.get("tool_name")) for m in sent[3:]] == [("tool", "lookup_order"), ("tool", "read_policy")]
    assert json.loads(sent[3]["content"])["content"]["paid_cents"] == 4999


def test_each_turn_numbers_its_calls_afresh(server, sleeps, desk):
    """Two tool turns in one run: ollama_0_0, then ollama_1_0, each answered under its own id."""
    lookup = ollama_reply({"tool_calls": [_call("lookup_order", {"order_id": "A-17"})]})
    server.script(lookup, ollama_reply({"tool_calls": [_call("read_policy", {})]}), ollama_reply({"content": "Done."}))
    result = run(TASK, _model(server, sleeps), desk.tools)
    assert result.stop is Stop.ANSWERED
    assert [o.call_id for o in result.state.observations] == ["ollama_0_0", "ollama_1_0"]
    assert [o.kind for o in result.state.observations] == ["result", "result"]


def test_ids_depend_only_on_the_transcript():
    """The same transcript gives the same ids, and a later turn gives new ones."""
    model = OllamaChat(base_url="http://127.0.0.1:9", model="m")
    data = {"message": {"role": "assistant", "content": "", "tool_calls": [_call("t", {})]}}
    assert model.read_reply(data, turn=2).message["tool_calls"][0]["id"] == "ollama_2_0"
    assert model.read_reply(data, turn=2) == model.read_reply(data, turn=2)
    assert model.read_reply(data, turn=3).message["tool_calls"][0]["id"] == "ollama_3_0"


def test_an_id_sent_by_the_server_is_kept():
    """Newer servers send ids; they are kept, not replaced."""
    model = OllamaChat(base_url="http://127.0.0.1:9", model="m")
    data = {"message": {"content": "", "tool_calls": [{"id": "call_x", "function": {"name": "t", "arguments": {}}}]}}
    assert model.read_reply(data).message["tool_calls"][0]["id"] == "call_x"


def test_string_arguments_that_do_not_parse_reach_the_engine_as_invalid(server, sleeps, desk):
    """Arguments as a broken string are passed through; the engine makes an invalid observation."""
    server.script(
        ollama_reply({"tool_calls": [_call("lookup_order", '{"order_id": ')]}),
        ollama_reply({"content": "Giving up."}),
    )
    result = run(TASK, _model(server, sleeps), desk.tools)
    assert result.stop is Stop.ANSWERED
    assert [o.kind for o in result.state.observations] == ["invalid"]
    assert server.requests[1].body["messages"][2]["tool_calls"][0]["function"]["arguments"] == {}


def test_model_not_found_keeps_status_and_message(server, sleeps, desk):
    """Ollama's {"error": ...} with 404: provider_error kind http, status 404, message quoted, not retried."""
    server.script(json_reply({"error": 'model "llama9" not found, try pulling it first'}, 404))
    result = run(TASK, _model(server, sleeps), desk.tools)
    assert (result.state.fault.kind, result.state.fault.status) == ("http", 404)
    assert "try pulling it first" in result.reason and len(server.requests) == 1


def test_dropped_connection_is_retried_only_when_opted_in(server, sleeps, desk):
    """retry_unknown_outcome=True retries a dropped connection, and the retry answers."""
    server.script(DROP, ollama_reply({"content": "back"}))
    result = run(TASK, _model(server, sleeps, retry_unknown_outcome=True), desk.tools)
    assert result.stop is Stop.ANSWERED and result.answer == "back"
    assert len(server.requests) == 2


def test_a_reply_without_message_ends_bad_response(server, sleeps, desk):
    """``{"done": true}`` alone carries no message: bad_response."""
    server.script(json_reply({"done": True}))
    result = run(TASK, _model(server, sleeps), desk.tools)
    assert (result.stop, result.state.fault.kind) == (Stop.PROVIDER_ERROR, "bad_response")


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1:11434", "http://127.0.0.1:11434"),
        ("gpu-box", "http://gpu-box:11434"),
        ("https://ollama.example/", "https://ollama.example"),
        ("http://10.0.0.5:8000", "http://10.0.0.5:8000"),
        ("http://proxy.example/ollama", "http://proxy.example/ollama"),
    ],
)
def test_ollama_host_is_read_as_ollama_reads_it(monkeypatch, host, expected):
    """OLLAMA_HOST may omit the scheme and the port."""
    monkeypatch.setenv("OLLAMA_HOST", host)
    assert OllamaChat(model="m").base_url == expected


def test_text_parts_and_a_null_content_are_sent_as_strings():
    """Content given as OpenAI text parts is joined; a call-only assistant message sends ''."""
    model = OllamaChat(base_url="http://127.0.0.1:9", model="m")
    body = model.request_body(
        [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": None, "tool_calls": []},
        ],
        [],
    )
    assert [m["content"] for m in body["messages"]] == ["ab", ""]
    assert "tools" not in body and "options" not in body
