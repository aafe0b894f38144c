"""OpenAIChat against a real HTTP server on loopback: good runs, and every failure's typed ending."""

from __future__ import annotations

import json

import httpx
import pytest

from agent_fsm import Limits, ProviderFailure, Stop, run
from agent_fsm.examples.support_desk import refund_gate
from agent_fsm.providers import OpenAIChat

from .loopback import (
    DROP,
    free_port_refusing,
    json_reply,
    openai_answer,
    openai_tool_call,
    slow,
    stalled,
    text_reply,
    truncated,
)

TASK = "My order A-17 came broken. What had I paid?"
LOOKUP = '{"order_id": "A-17"}'


def _model(server, sleeps, **options) -> OpenAIChat:
    options.setdefault("read_timeout", 2.0)
    return OpenAIChat(base_url=server.url + "/v1", model="qwen2.5", sleep=sleeps.append, **options)


def _run(model, desk, **kwargs):
    return run(TASK, model, desk.tools, gate=refund_gate, **kwargs)


def _nothing_made_up(result) -> bool:
    """The run kept its opening transcript and invented no assistant message or answer."""
    return result.answer is None and [m["role"] for m in result.state.messages] == ["system", "user"]


# --- good runs -------------------------------------------------------------------------


def test_tool_call_then_answer_runs_to_answered(server, sleeps, desk):
    """A proposal, its observation sent back under the same id, then an answer: answered."""
    server.script(
        openai_tool_call("call_a1", "lookup_order", LOOKUP, prompt_tokens=111),
        openai_answer("You paid 4999 cents.", 222),
    )
    result = _run(_model(server, sleeps, api_key="sk-local"), desk)
    assert result.stop is Stop.ANSWERED
    assert result.answer == "You paid 4999 cents."
    assert [o.kind for o in result.state.observations] == ["result"]
    first, second = server.requests
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer sk-local"
    assert first.body["model"] == "qwen2.5"
    assert [t["function"]["name"] for t in first.body["tools"]] == list(desk.tools)
    assert [m["role"] for m in first.body["messages"]] == ["system", "user"]
    sent_back = second.body["messages"]
    assert [m["role"] for m in sent_back] == ["system", "user", "assistant", "tool"]
    assert sent_back[2]["tool_calls"][0]["id"] == "call_a1"
    assert sent_back[3]["tool_call_id"] == "call_a1"
    assert json.loads(sent_back[3]["content"])["content"]["paid_cents"] == 4999
    assert result.state.prompt_token_log == [111, 222]


def test_malformed_arguments_become_an_invalid_observation_not_a_provider_error(server, sleeps, desk):
    """Broken JSON in a tool call inside a valid response is the engine's to judge: invalid, then the run goes on."""
    server.script(
        openai_tool_call("call_b1", "lookup_order", '{"order_id": "A-17"'), openai_answer("Sorry, retrying failed.")
    )
    result = _run(_model(server, sleeps), desk)
    assert result.stop is Stop.ANSWERED
    assert [o.kind for o in result.state.observations] == ["invalid"]
    assert result.state.fault is None
    assert server.requests[1].body["messages"][-1]["tool_call_id"] == "call_b1"


def test_unknown_tool_and_odd_tool_calls_pass_through_to_the_engine(server, sleeps, desk):
    """A call naming no registered tool is returned as is; the engine answers it invalid."""
    server.script(openai_tool_call("call_c1", "wire_money", "{}"), openai_answer("done"))
    result = _run(_model(server, sleeps), desk)
    assert result.stop is Stop.ANSWERED
    assert "unknown tool" in result.state.observations[0].content


def test_no_tools_declared_sends_no_tools_key(server, sleeps):
    """An empty registry sends no ``tools`` (some servers refuse an empty list)."""
    server.script(openai_answer("hello"))
    result = run("hi", _model(server, sleeps), {})
    assert result.stop is Stop.ANSWERED
    assert "tools" not in server.requests[0].body


# --- retried failures ----------------------------------------------------------------


def test_429_with_retry_after_waits_as_asked_then_succeeds(server, sleeps, desk):
    """429 + Retry-After: 3 sleeps 3 s (injected) and the retry's answer ends the run answered."""
    server.script(json_reply({"error": {"message": "slow down"}}, 429, {"retry-after": "3"}), openai_answer("fine"))
    result = _run(_model(server, sleeps), desk)
    assert result.stop is Stop.ANSWERED
    assert sleeps == [3.0]
    assert len(server.requests) == 2


def test_429_asking_to_wait_beyond_the_cap_is_not_retried(server, sleeps, desk):
    """A Retry-After above max_retry_wait ends provider_error at once, status 429 kept."""
    server.script(json_reply({"error": {"message": "quota"}}, 429, {"retry-after": "600"}))
    result = _run(_model(server, sleeps, max_retry_wait=20), desk)
    assert result.stop is Stop.PROVIDER_ERROR
    assert (result.state.fault.kind, result.state.fault.status) == ("http", 429)
    assert "600s" in result.reason and "quota" in result.reason
    assert sleeps == [] and len(server.requests) == 1
    assert _nothing_made_up(result)


def test_500_is_retried_with_backoff_until_the_budget_is_spent(server, sleeps, desk):
    """Persistent 500: 1 + max_retries attempts with doubling waits, then provider_error status 500."""
    server.script(*[json_reply({"error": {"message": "boom"}}, 500)] * 3)
    result = _run(_model(server, sleeps, max_retries=2, backoff=0.25), desk)
    assert result.stop is Stop.PROVIDER_ERROR
    fault = result.state.fault
    assert (fault.type, fault.kind, fault.status) == ("ProviderFailure", "http", 500)
    assert "gave up after 3 attempts" in fault.message
    assert sleeps == [0.25, 0.5]
    assert len(server.requests) == 3
    assert _nothing_made_up(result)


def test_a_503_then_success_recovers(server, sleeps, desk):
    """One transient 503 costs a retry, not the run."""
    server.script(text_reply("unavailable", 503), openai_answer("ok"))
    result = _run(_model(server, sleeps), desk)
    assert result.stop is Stop.ANSWERED and len(server.requests) == 2 and sleeps == [0.5]


def test_connection_refused_is_retried_then_ends_transport(sleeps, desk):
    """Nothing listening: retried (the request never left), then provider_error kind transport."""
    model = OpenAIChat(base_url=free_port_refusing() + "/v1", model="m", sleep=sleeps.append, max_retries=1)
    result = _run(model, desk)
    assert result.stop is Stop.PROVIDER_ERROR
    assert (result.state.fault.kind, result.state.fault.status) == ("transport", None)
    assert "could not connect" in result.reason
    assert sleeps == [0.5] and model.requests_made == 2


# --- failures whose outcome is unknown: not retried by default ------------------------------


def test_read_timeout_ends_timeout_without_a_retry(server, sleeps, desk):
    """The reply comes after the read timeout: provider_error kind timeout, and no second request."""
    server.script(slow(openai_answer("late"), 5), openai_answer("never asked"))
    result = _run(_model(server, sleeps, read_timeout=0.2), desk)
    assert result.stop is Stop.PROVIDER_ERROR
    assert (result.state.fault.kind, result.state.fault.status) == ("timeout", None)
    assert "timed out waiting for the reply" in result.reason
    assert len(server.requests) == 1 and sleeps == []
    assert _nothing_made_up(result)


def test_read_timeout_is_retried_when_the_caller_opts_in(server, sleeps, desk):
    """retry_unknown_outcome=True retries a timed-out request; the second reply answers."""
    server.script(slow(openai_answer("late"), 5), openai_answer("on time"))
    result = _run(_model(server, sleeps, read_timeout=0.2, retry_unknown_outcome=True), desk)
    assert result.stop is Stop.ANSWERED and result.answer == "on time"
    assert len(server.requests) == 2


def test_a_body_stalling_past_the_read_timeout_ends_timeout_with_the_status(server, sleeps, desk):
    """Headers arrive, then the body stalls: provider_error kind timeout, status 200, the phase named."""
    server.script(stalled(openai_answer("slowly"), 5))
    result = _run(_model(server, sleeps, read_timeout=0.2), desk)
    assert (result.state.fault.kind, result.state.fault.status) == ("timeout", 200)
    assert "timed out reading the reply body" in result.reason
    assert len(server.requests) == 1
    assert _nothing_made_up(result)


def test_dropped_connection_ends_disconnected(server, sleeps, desk):
    """The server reads the request and hangs up: provider_error kind disconnected, not retried."""
    server.script(DROP, openai_answer("never asked"))
    result = _run(_model(server, sleeps), desk)
    assert result.stop is Stop.PROVIDER_ERROR
    assert result.state.fault.kind == "disconnected"
    assert len(server.requests) == 1
    assert _nothing_made_up(result)


def test_truncated_body_ends_truncated_with_the_status(server, sleeps, desk):
    """Content-Length promises more than arrives: provider_error kind truncated, status 200."""
    server.script(truncated(openai_answer("cut short")))
    result = _run(_model(server, sleeps), desk)
    assert result.stop is Stop.PROVIDER_ERROR
    assert (result.state.fault.kind, result.state.fault.status) == ("truncated", 200)
    assert "broke off" in result.reason
    assert _nothing_made_up(result)


# --- bodies that are not a completion --------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (text_reply("<html>gateway</html>"), "not JSON"),
        (json_reply({"choices": []}), "no choices"),
        (json_reply({"object": "list"}), "no choices"),
        (json_reply({"choices": [{"finish_reason": "stop"}]}), "no message"),
        (json_reply({"choices": [{"message": {"role": "assistant"}, "finish_reason": "stop"}]}), "neither content"),
        (json_reply(["not", "an", "object"]), "expected a JSON object"),
    ],
)
def test_a_body_that_is_not_a_completion_ends_bad_response(server, sleeps, desk, reply, needle):
    """Non-JSON or wrongly shaped 200 replies end provider_error kind bad_response, never a made-up answer."""
    server.script(reply)
    result = _run(_model(server, sleeps), desk)
    assert result.stop is Stop.PROVIDER_ERROR
    assert (result.state.fault.kind, result.state.fault.status) == ("bad_response", 200)
    assert needle in result.reason
    assert result.answer is None and len(server.requests) == 1
    assert _nothing_made_up(result)


def test_an_oversized_body_ends_bad_response(server, sleeps, desk):
    """A reply larger than max_response_bytes is refused."""
    server.script(openai_answer("x" * 5000))
    result = _run(_model(server, sleeps, max_response_bytes=1000), desk)
    assert result.state.fault.kind == "bad_response"
    assert "max_response_bytes=1000" in result.reason


def test_client_errors_are_not_retried_and_keep_the_status(server, sleeps, desk):
    """400 is the caller's mistake: one request, provider_error kind http, status 400, server's message quoted."""
    server.script(json_reply({"error": {"message": "tools[0] is invalid"}}, 400))
    result = _run(_model(server, sleeps), desk)
    assert (result.state.fault.kind, result.state.fault.status) == ("http", 400)
    assert "tools[0] is invalid" in result.reason
    assert len(server.requests) == 1 and sleeps == []
    assert _nothing_made_up(result)


def test_the_api_key_never_reaches_the_fault_or_the_repr(server, sleeps, desk):
    """A 401 body echoing the key is quoted with the key blanked out; repr and state JSON omit it."""
    secret = "sk-live-0123456789abcdef"
    server.script(json_reply({"error": {"message": f"Incorrect API key provided: {secret}"}}, 401))
    model = _model(server, sleeps, api_key=secret)
    result = _run(model, desk)
    assert (result.state.fault.kind, result.state.fault.status) == ("http", 401)
    assert "Incorrect API key provided: [redacted]" in result.reason
    assert secret not in result.state.to_json()
    assert secret not in repr(model)
    assert server.requests[0].headers["authorization"] == f"Bearer {secret}"


# --- the request limit ---------------------------------------------------------------------


def test_request_limit_ends_the_run_with_the_transcript_kept(server, sleeps, desk):
    """max_requests=2 and a model that keeps calling: the third chat ends provider_error kind request_limit."""
    server.script(*[openai_tool_call(f"call_{i}", "lookup_order", LOOKUP) for i in range(3)])
    model = _model(server, sleeps, max_requests=2)
    result = _run(model, desk, limits=Limits(max_turns=10, repeated_denials=5))
    assert result.stop is Stop.PROVIDER_ERROR
    assert (result.state.fault.kind, result.state.fault.status) == ("request_limit", None)
    assert len(server.requests) == 2 and model.requests_made == 2
    assert [o.call_id for o in result.state.observations] == ["call_0", "call_1"]


def test_a_retry_the_request_limit_forbids_reports_the_real_cause(server, sleeps, desk):
    """When the limit stops a retry, the fault is the 500 that needed it, with a note."""
    server.script(*[json_reply({}, 500)] * 3)
    result = _run(_model(server, sleeps, max_requests=2, max_retries=5), desk)
    assert (result.state.fault.kind, result.state.fault.status) == ("http", 500)
    assert "limit of 2 requests is spent" in result.reason
    assert len(server.requests) == 2


def test_a_caller_supplied_client_is_used_and_left_open(server, sleeps):
    """client=httpx.Client(...) carries the requests; closing the adapter does not close it."""
    server.script(openai_answer("via your client"))
    with httpx.Client(headers={"x-trace": "t-1"}) as client:
        model = OpenAIChat(base_url=server.url + "/v1", model="m", client=client)
        reply = model.chat([{"role": "user", "content": "hi"}])
        model.close()
        assert not client.is_closed
    assert reply.message["content"] == "via your client"
    assert server.requests[0].headers["x-trace"] == "t-1"


def test_provider_failure_is_raised_directly_from_chat(sleeps):
    """Outside a run, chat raises ProviderFailure (an OSError) chained to the httpx error."""
    model = OpenAIChat(base_url=free_port_refusing(), model="m", max_retries=0, sleep=sleeps.append)
    with pytest.raises(OSError) as caught:
        model.chat([{"role": "user", "content": "hi"}])
    assert isinstance(caught.value, ProviderFailure)
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
