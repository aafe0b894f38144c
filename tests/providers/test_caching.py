"""
Prompt caching: Anthropic ``cache_control`` breakpoints within its limit, OpenAI's ``prompt_cache_key`` per agent.

The requests are the ones the adapters send to the loopback server over
recorded runs; the cached-token figures are read from a recorded Claude
exchange whose second request was served from the cache.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import Limits, allow_all, run
from agent_fsm.providers import AnthropicMessages, OpenAIChat, OpenAIResponses, ProviderConfigError
from agent_fsm.providers._anthropic import MAX_BREAKPOINTS

from .native import make_native
from .recordings import NATIVE_RECORDINGS, RECORDINGS
from .test_recorded import make_adapter

BY_NAME = {r.name: r for r in RECORDINGS + NATIVE_RECORDINGS}


def _marks(body: dict[str, Any]) -> list[str]:
    """Where a request carries ``cache_control``: ``tools``, ``system`` or ``<role>[<message index>]``."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    system = body.get("system")
    found += ["system" for b in system if "cache_control" in b] if isinstance(system, list) else []
    for index, message in enumerate(body["messages"]):
        found += [f"{message['role']}[{index}]" for b in message["content"] if "cache_control" in b]
    return found


def test_breakpoints_go_on_the_tools_the_system_prompt_and_the_last_two_user_turns(server):
    """Over Claude's recorded tool run: the last tool, the system prompt, the newest two user turns; four at most."""
    recording = BY_NAME["anthropic__test_anthropic_tool_output"]
    server.script(*recording.replies())
    model = make_adapter(recording, server.url, cache=True)
    run("What is the largest city in the user country?", model, recording.registry([]), gate=allow_all,
        limits=Limits(max_turns=2))  # fmt: skip
    first, second = (r.body for r in server.requests)
    last_tool = f"tools[{len(first['tools']) - 1}]"
    assert _marks(first) == [last_tool, "system", "user[0]"]
    assert _marks(second) == [last_tool, "system", "user[0]", "user[2]"]
    assert second["system"][0]["text"] == first["system"][0]["text"]


def test_without_cache_no_breakpoint_is_sent(server):
    """The default sends the request as before: no ``cache_control`` anywhere, the system prompt a string."""
    recording = BY_NAME["anthropic__test_anthropic_tool_output"]
    server.script(recording.reply(0))
    make_adapter(recording, server.url).chat(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    )
    body = server.requests[0].body
    assert "cache_control" not in json.dumps(body) and body["system"] == "Be brief."


def _transcript(rounds: int, thinking: bool) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "S"}, {"role": "user", "content": "task"}]
    for n in range(rounds):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "look", "arguments": "{}"}}
        assistant: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        if thinking:
            assistant["anthropic_content"] = [
                {"type": "thinking", "thinking": "hm", "signature": "sig"},
                {"type": "tool_use", "id": f"c{n}", "name": "look", "input": {}},
            ]
        messages += [assistant, {"role": "tool", "tool_call_id": f"c{n}", "content": "seen"}]
    return messages


TOOLS = [{"type": "function", "function": {"name": "look", "description": "", "parameters": {"type": "object"}}}]


@given(rounds=st.integers(min_value=0, max_value=30), thinking=st.booleans(), tools=st.booleans())
def test_breakpoints_stay_within_the_limit_and_each_request_repeats_the_last_prefix(rounds, thinking, tools):
    """Any run length: at most four marks, none on an assistant block, and request n+1 carries request n's last mark."""
    model = AnthropicMessages(model="m", base_url="http://127.0.0.1:9", cache=True)
    declared = TOOLS if tools else []
    now = model.request_body(_transcript(rounds, thinking), declared)
    later = model.request_body(_transcript(rounds + 1, thinking), declared)
    for body in (now, later):
        marks = _marks(body)
        assert len(marks) <= MAX_BREAKPOINTS and not any(m.startswith("assistant") for m in marks)
    newest = [m for m in _marks(now) if m.startswith("user")][-1]
    assert newest in _marks(later)  # the prefix the last request wrote is read back by the next one
    index = int(newest[5:-1])
    assert _strip(later["messages"][: index + 1]) == _strip(now["messages"][: index + 1])
    assert _strip(later.get("tools")) == _strip(now.get("tools")) and _strip(later["system"]) == _strip(now["system"])


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    return [_strip(v) for v in value] if isinstance(value, list) else value


def test_a_cached_prefix_is_read_as_cached_tokens():
    """Claude's recorded second request, served from the cache: 1,111 cached tokens of a 1,114-token prompt."""
    recording = BY_NAME["anthropic__test_anthropic_cache_real_api"]
    model = AnthropicMessages(model="m", base_url="http://127.0.0.1:9")
    reply = model.read_reply(recording.response(1))
    assert (reply.prompt_tokens, reply.cached_tokens) == (1111 + 418 + 3, 1111)


def _key(server: Any, model: Any, system: str, tools: list[dict[str, Any]]) -> str:
    model.chat([{"role": "system", "content": system}, {"role": "user", "content": "hi"}], tools)
    return str(server.requests[-1].body["prompt_cache_key"])


@pytest.mark.parametrize("adapter", ["chat", "responses"])
def test_prompt_cache_key_is_one_per_agent(server, adapter):
    """Runs of one agent share a key; another system prompt or tool set gets another; a given key is sent as is."""
    if adapter == "chat":
        recording = BY_NAME["openai__test_valid_response"]

        def build(**options: Any) -> Any:
            return make_adapter(recording, server.url, **options)
    else:
        recording = BY_NAME["openai__test_openai_responses_model_simple_response"]

        def build(**options: Any) -> Any:
            return make_native(recording, server.url, **options)

    server.script(*[recording.reply(0)] * 5)
    same = _key(server, build(cache=True), "Be brief.", TOOLS)
    assert same.startswith("agent_fsm-")
    assert _key(server, build(cache=True), "Be brief.", TOOLS) == same
    assert _key(server, build(cache=True), "Be thorough.", TOOLS) != same
    assert _key(server, build(cache=True), "Be brief.", []) != same
    assert _key(server, build(cache="support-desk-v2"), "Be brief.", TOOLS) == "support-desk-v2"


def test_without_cache_no_key_is_sent(server):
    """The default sends no ``prompt_cache_key``."""
    recording = BY_NAME["openai__test_valid_response"]
    server.script(recording.reply(0))
    make_adapter(recording, server.url).chat([{"role": "user", "content": "hi"}])
    assert "prompt_cache_key" not in server.requests[0].body


def test_a_cache_setting_that_cannot_be_honoured_is_a_configuration_error():
    """An empty key, a key for Anthropic (its cache has none) or a number: refused when the adapter is built."""
    with pytest.raises(ProviderConfigError, match="cache"):
        OpenAIChat(model="m", cache="")
    with pytest.raises(ProviderConfigError, match="cache"):
        OpenAIResponses(model="m", cache=3)  # type: ignore[arg-type]
    with pytest.raises(ProviderConfigError, match="cache"):
        AnthropicMessages(model="m", cache="key")  # type: ignore[arg-type]
