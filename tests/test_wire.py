"""The wire format: message builders and the parser that never raises."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import ToolCall, answer_message, parse_tool_calls, tool_call_message
from agent_fsm.engine import assistant_text, normalise_reply

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


def test_tool_call_message_carries_arguments_as_a_json_string():
    """Arguments travel as text, the id correlates, and a thought rides in content."""
    message = tool_call_message("call_1", "lookup", {"id": "A"}, thought="check first")
    assert message["content"] == "check first"
    (item,) = message["tool_calls"]
    assert item == {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"id": "A"}'}}


def test_parse_round_trips_a_well_formed_call():
    """Parsing a built message gives back the call."""
    calls = parse_tool_calls(tool_call_message("c7", "refund", {"amount": 5}))
    assert calls == [ToolCall("c7", "refund", {"amount": 5})]


def test_broken_json_parses_to_none_arguments():
    """Unparseable argument text gives arguments=None and keeps the raw text."""
    (call,) = parse_tool_calls(tool_call_message("c8", "refund", '{"amount": A-17}'))
    assert call.arguments is None and call.raw_arguments == '{"amount": A-17}'


def test_plain_answer_has_no_calls():
    """An answer proposes nothing."""
    assert parse_tool_calls(answer_message("hello")) == []


def test_empty_argument_string_means_no_arguments():
    """Servers often send '' for a call without arguments."""
    (call,) = parse_tool_calls(tool_call_message("c", "read_policy", ""))
    assert call.arguments == {}


def test_already_parsed_arguments_are_accepted():
    """Some servers send arguments as an object; it is kept and re-serialized for the transcript."""
    message, calls = normalise_reply(
        {"role": "assistant", "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": {"a": 1}}}]}, 1
    )
    assert calls[0].arguments == {"a": 1}
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"a": 1}


def test_text_parts_are_joined():
    """List-of-parts content is read as its joined text."""
    assert assistant_text({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}, 3]}) == "ab"


@given(reply=json_values | st.dictionaries(st.sampled_from(["role", "content", "tool_calls"]), json_values))
def test_normalise_never_raises_and_always_yields_wire_format(reply):
    """Whatever the model returns, the stored message is valid wire format and every call has a string id."""
    message, calls = normalise_reply(reply, 3)
    assert message["role"] == "assistant"
    json.dumps(message)  # always serializable
    assert len(calls) == len(message.get("tool_calls", []))
    for call, item in zip(calls, message.get("tool_calls", [])):
        assert isinstance(call.call_id, str) and call.call_id == item["id"]
        assert isinstance(item["function"]["arguments"], str)
        assert call.arguments is None or isinstance(call.arguments, dict)


@given(arguments=st.text())
def test_any_argument_text_parses_without_raising(arguments):
    """Any text in the arguments slot yields a ToolCall, never an exception."""
    (call,) = parse_tool_calls(tool_call_message("c", "f", arguments))
    assert call.arguments is None or isinstance(call.arguments, dict)
