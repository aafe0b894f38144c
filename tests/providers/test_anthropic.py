"""AnthropicMessages: the transcript conversion both ways, and runs against a loopback Messages API."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import Stop, run, tool_call_message
from agent_fsm.examples.support_desk import refund_gate
from agent_fsm.providers import (
    AnthropicMessages,
    from_anthropic_message,
    to_anthropic_messages,
)

from .loopback import anthropic_reply, json_reply, truncated

TASK = "My order A-17 came broken. What had I paid?"


def _tool_use(call_id: str, name: str, arguments: dict) -> dict:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def _model(server, sleeps, **options) -> AnthropicMessages:
    options.setdefault("read_timeout", 2.0)
    return AnthropicMessages(base_url=server.url, model="claude-test", sleep=sleeps.append, **options)


# --- conversion, without a network ------------------------------------------------------------


def test_system_prompt_travels_apart_and_roles_alternate():
    """System text leaves the message list; what remains starts with the user."""
    system, messages = to_anthropic_messages(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    )
    assert system == "Be brief."
    assert messages == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_parallel_calls_become_tool_use_blocks_and_their_results_one_user_message():
    """Two calls in one turn: two tool_use blocks with parsed input, then both results merged, ids kept."""
    assistant = {
        "role": "assistant",
        "content": "Looking both up.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"order_id": "A-17"}'},
            },
            {"id": "call_2", "type": "function", "function": {"name": "read_policy", "arguments": ""}},
        ],
    }
    results = [
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"ok": True, "kind": "result", "content": 1})},
        {
            "role": "tool",
            "tool_call_id": "call_2",
            "content": json.dumps({"ok": False, "kind": "denied", "content": "no"}),
        },
    ]
    _, messages = to_anthropic_messages([{"role": "user", "content": "go"}, assistant, *results])
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "text", "text": "Looking both up."},
        {"type": "tool_use", "id": "call_1", "name": "lookup_order", "input": {"order_id": "A-17"}},
        {"type": "tool_use", "id": "call_2", "name": "read_policy", "input": {}},
    ]
    blocks = messages[2]["content"]
    assert [b["tool_use_id"] for b in blocks] == ["call_1", "call_2"]
    assert "is_error" not in blocks[0] and blocks[1]["is_error"] is True


def test_broken_arguments_are_sent_as_an_empty_input_object():
    """Arguments that never parsed cannot be an ``input`` object; ``{}`` is sent, the tool result says why."""
    _, messages = to_anthropic_messages([{"role": "user", "content": "go"}, tool_call_message("c", "t", '{"a": ')])
    assert messages[1]["content"] == [{"type": "tool_use", "id": "c", "name": "t", "input": {}}]


def test_a_user_message_after_tool_results_joins_their_message():
    """Tool results followed by user text: one user message, results first."""
    _, messages = to_anthropic_messages(
        [
            {"role": "user", "content": "go"},
            tool_call_message("c", "t", {}),
            {"role": "tool", "tool_call_id": "c", "content": "{}"},
            {"role": "user", "content": "and?"},
        ]
    )
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [b["type"] for b in messages[2]["content"]] == ["tool_result", "text"]


def test_reply_blocks_become_an_openai_wire_message_with_string_arguments():
    """Text joined, tool_use kept with its id and input serialized to a JSON string; with thinking, all blocks kept."""
    message = from_anthropic_message(
        {
            "content": [
                {"type": "thinking", "thinking": "hmm"},
                {"type": "text", "text": "Checking."},
                _tool_use("toolu_9", "lookup_order", {"order_id": "A-17"}),
            ]
        }
    )
    assert message == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "toolu_9",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"order_id": "A-17"}'},
            }
        ],
        "anthropic_content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": "Checking."},
            _tool_use("toolu_9", "lookup_order", {"order_id": "A-17"}),
        ],
    }


def test_usage_counts_cached_prompt_parts():
    """input_tokens plus cache creation and cache reads is the prompt's size."""
    model = AnthropicMessages(base_url="http://127.0.0.1:9", model="m")
    reply = model.read_reply(
        {
            "content": [{"type": "text", "text": "hi"}],
            "usage": {"input_tokens": 10, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000},
        }
    )
    assert reply.prompt_tokens == 1110


# --- runs over loopback HTTP --------------------------------------------------------------------


def test_tool_use_then_answer_runs_to_answered(server, sleeps, desk):
    """tool_use, its tool_result sent back under the same id, then text: answered with the reported usage."""
    server.script(
        anthropic_reply(
            _tool_use("toolu_01", "lookup_order", {"order_id": "A-17"}), input_tokens=300, stop_reason="tool_use"
        ),
        anthropic_reply({"type": "text", "text": "You paid 4999 cents."}, input_tokens=340),
    )
    result = run(TASK, _model(server, sleeps, api_key="ak-local", max_tokens=256), desk.tools, gate=refund_gate)
    assert result.stop is Stop.ANSWERED
    assert result.answer == "You paid 4999 cents."
    first, second = server.requests
    assert first.path == "/v1/messages"
    assert first.headers["x-api-key"] == "ak-local"
    assert first.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in first.headers
    assert first.body["max_tokens"] == 256
    assert first.body["system"] == result.state.messages[0]["content"]
    assert first.body["tools"][0] == {
        "name": "lookup_order",
        "description": desk.tools["lookup_order"].description,
        "input_schema": desk.tools["lookup_order"].json_schema,
    }
    tool_result = second.body["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result" and tool_result["tool_use_id"] == "toolu_01"
    assert json.loads(tool_result["content"])["content"]["paid_cents"] == 4999
    assert result.state.messages[2]["tool_calls"][0]["function"]["arguments"] == '{"order_id": "A-17"}'
    assert result.state.prompt_token_log == [300, 340]


def test_tool_use_with_arguments_breaking_the_schema_is_invalid_not_a_provider_error(server, sleeps, desk):
    """An input object violating the schema passes through; the engine answers it invalid and the run goes on."""
    server.script(
        anthropic_reply(_tool_use("toolu_02", "lookup_order", {"order": 17}), stop_reason="tool_use"),
        anthropic_reply({"type": "text", "text": "I could not look it up."}),
    )
    result = run(TASK, _model(server, sleeps), desk.tools, gate=refund_gate)
    assert result.stop is Stop.ANSWERED
    assert [o.kind for o in result.state.observations] == ["invalid"]
    assert server.requests[1].body["messages"][-1]["content"][0]["is_error"] is True


def test_overloaded_529_is_retried(server, sleeps, desk):
    """Anthropic's 529 overloaded is a 5xx: retried after the backoff."""
    server.script(
        json_reply({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, 529),
        anthropic_reply({"type": "text", "text": "ok"}),
    )
    result = run(TASK, _model(server, sleeps), desk.tools)
    assert result.stop is Stop.ANSWERED and sleeps == [0.5]


def test_an_error_status_keeps_the_status_and_the_message(server, sleeps, desk):
    """404 with Anthropic's error shape: provider_error kind http, status 404, message quoted."""
    server.script(
        json_reply({"type": "error", "error": {"type": "not_found_error", "message": "model: claude-x"}}, 404)
    )
    result = run(TASK, _model(server, sleeps), desk.tools)
    assert (result.state.fault.kind, result.state.fault.status) == ("http", 404)
    assert "model: claude-x" in result.reason


def test_a_reply_without_content_blocks_ends_bad_response(server, sleeps, desk):
    """No ``content`` list, or one with nothing usable, is not a reply: bad_response."""
    server.script(json_reply({"type": "message", "usage": {}}), anthropic_reply(stop_reason="end_turn"))
    first = run(TASK, _model(server, sleeps), desk.tools)
    second = run(TASK, _model(server, sleeps), desk.tools)
    assert first.state.fault.kind == second.state.fault.kind == "bad_response"
    assert "no content blocks" in first.reason
    assert "stop_reason='end_turn'" in second.reason


def test_an_empty_reply_cut_off_at_max_tokens_is_a_rejected_answer_not_a_fault(server, sleeps, desk):
    """Nothing but a ``max_tokens`` stop is an unfinished turn the engine refuses, not a transport failure."""
    server.script(anthropic_reply(stop_reason="max_tokens"))
    result = run(TASK, _model(server, sleeps), desk.tools)
    assert (result.stop, result.state.finish, result.state.fault) == (Stop.ANSWER_REJECTED, "length", None)
    assert "cut off" in result.reason


def test_truncated_reply_ends_truncated(server, sleeps, desk):
    """A body cut short ends provider_error kind truncated."""
    server.script(truncated(anthropic_reply({"type": "text", "text": "hello"})))
    result = run(TASK, _model(server, sleeps), desk.tools)
    assert (result.stop, result.state.fault.kind) == (Stop.PROVIDER_ERROR, "truncated")


# --- property: any engine transcript converts to a valid, lossless Messages request -----------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def _transcripts(draw) -> list[dict]:
    """system?, user, then turns of (assistant with 0-3 calls + their tool results), optionally a user message."""
    messages: list[dict] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(st.text(min_size=1, max_size=10))})
    messages.append({"role": "user", "content": draw(st.text(min_size=1, max_size=10))})
    next_id = 0
    for _ in range(draw(st.integers(0, 4))):
        calls = []
        for _ in range(draw(st.integers(0, 3))):
            arguments = draw(st.dictionaries(st.text(max_size=5), _json_values, max_size=3))
            calls.append((f"call_{next_id}", draw(st.sampled_from(["a", "b"])), arguments))
            next_id += 1
        text = draw(st.one_of(st.none(), st.text(min_size=1, max_size=10)))
        if not calls and text is None:
            text = "done"
        message = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
            ]
        messages.append(message)
        messages.extend({"role": "tool", "tool_call_id": i, "content": json.dumps({"ok": True})} for i, _, _ in calls)
        if draw(st.booleans()) or not calls:
            messages.append({"role": "user", "content": draw(st.text(min_size=1, max_size=10))})
    return messages


@given(_transcripts())
def test_any_transcript_converts_to_alternating_messages_that_round_trip(messages):
    """Roles alternate from the user; each tool_result answers the turn before; assistant turns round-trip."""
    system, converted = to_anthropic_messages(messages)
    assert system == next((m["content"] for m in messages if m["role"] == "system"), None)
    assert [m["role"] for m in converted] == ["user", "assistant"] * (len(converted) // 2) + ["user"] * (
        len(converted) % 2
    )
    for previous, current in itertools.pairwise(converted):
        offered = {b["id"] for b in previous["content"] if b["type"] == "tool_use"}
        answered = [b["tool_use_id"] for b in current["content"] if b["type"] == "tool_result"]
        assert set(answered) == offered
    originals = [m for m in messages if m["role"] == "assistant"]
    replies = [from_anthropic_message(m) for m in converted if m["role"] == "assistant"]
    assert len(replies) == len(originals)
    for original, back in zip(originals, replies, strict=True):
        assert back["content"] == original["content"]
        assert [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in back.get("tool_calls", [])
        ] == [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in original.get("tool_calls", [])
        ]
