"""
Each way the adapters went wrong against real servers (issue 16, items 1 to 9), replayed from a recording.

Every test serves recorded bytes from 127.0.0.1 through a real adapter and ``run``.
Where no public recording shows the exact case, the test takes a real recording and
changes the one field at issue (named in the test's docstring as "derived").
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import pytest

from agent_fsm import Limits, ProviderFailure, Stop, ToolDefinitionError, ToolSpec, allow_all, run
from agent_fsm.providers import AnthropicMessages, AzureOpenAIChat, OpenAIChat

from .loopback import json_reply, trickled
from .recordings import RECORDINGS, Recording
from .test_recorded import KEY, make_adapter

BY_NAME = {r.name: r for r in RECORDINGS}
LIMITS = Limits(max_turns=4, max_prompt_tokens=10**7)


def _recording(name: str) -> Recording:
    return BY_NAME[name]


def _derived(recording: Recording, index: int, change: Any) -> Any:
    """A copy of the ``index``-th recorded response body with ``change(body)`` applied."""
    body = copy.deepcopy(recording.response(index))
    change(body)
    return body


def _counting(tools: dict[str, ToolSpec]) -> tuple[dict[str, ToolSpec], list[str]]:
    """The same tools, each recording its name when its handler runs."""
    ran: list[str] = []

    def wrap(name: str, spec: ToolSpec) -> ToolSpec:
        def handler(**arguments: Any) -> Any:
            ran.append(name)
            return {"ok": "ran"}

        return ToolSpec(spec.description, spec.json_schema, handler)

    return {name: wrap(name, spec) for name, spec in tools.items()}, ran


# --- 1. refusals and filtered replies -----------------------------------------------------------------


def test_an_openai_refusal_is_a_typed_rejected_answer_with_its_text_kept(server):
    """content null + refusal (api.openai.com): answer_rejected, finish 'refusal', the text in reason and transcript."""
    recording = _recording("openai__sdk_test_parse_pydantic_model_refusal")
    server.script(recording.reply(0))
    result = run("task", make_adapter(recording, server.url), {}, limits=LIMITS)
    assert (result.stop, result.state.finish, result.state.fault) == (Stop.ANSWER_REJECTED, "refusal", None)
    assert result.code == "refusal"
    assert "I'm very sorry, but I can't assist with that." in result.reason
    assert result.state.messages[-1]["refusal"] == "I'm very sorry, but I can't assist with that."
    assert result.answer is None


def test_a_content_filter_with_null_content_is_a_typed_rejected_answer(server):
    """Azure's content_filter with null content (derived: the refusal recording, filtered) is no provider error."""
    recording = _recording("openai__sdk_test_parse_pydantic_model_refusal")

    def filtered(body: Any) -> None:
        body["choices"][0]["finish_reason"] = "content_filter"
        body["choices"][0]["message"]["refusal"] = None

    server.script(json_reply(_derived(recording, 0, filtered)))
    result = run("task", make_adapter(recording, server.url), {}, limits=LIMITS)
    assert (result.stop, result.state.finish, result.state.fault) == (Stop.ANSWER_REJECTED, "content_filter", None)
    assert result.code == "content_filter"
    assert "content filter" in result.reason


# --- 2. replies cut off at the token limit --------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["huggingface__test_max_completion_tokens", "openai__sdk_test_parse_max_tokens_reached"]
)
def test_an_answer_cut_off_at_the_token_limit_is_not_accepted_unless_asked(server, name):
    """finish_reason 'length' ends answer_rejected; Limits(accept_truncated=True) takes the text as the answer."""
    recording = _recording(name)
    text = recording.response(0)["choices"][0]["message"]["content"]
    server.script(recording.reply(0), recording.reply(0))
    refused = run("task", make_adapter(recording, server.url), {}, limits=LIMITS)
    assert (refused.stop, refused.state.finish, refused.code) == (Stop.ANSWER_REJECTED, "length", "truncated")
    assert "cut off" in refused.reason
    accepted = run("task", make_adapter(recording, server.url), {}, limits=Limits(accept_truncated=True))
    assert (accepted.stop, accepted.answer) == (Stop.ANSWERED, text)


def test_an_openai_call_cut_off_at_the_token_limit_is_never_executed(server):
    """A call in a 'length' reply (derived from api.openai.com's get_user_country call) is answered invalid, not run."""
    recording = _recording("openai__test_openai_tool_output")
    body = _derived(recording, 0, lambda b: b["choices"][0].update(finish_reason="length"))
    server.script(json_reply(body))
    tools, ran = _counting(recording.registry([]))
    result = run("task", make_adapter(recording, server.url), tools, gate=allow_all, limits=Limits(max_turns=1))
    assert ran == []
    assert [o.kind for o in result.state.observations] == ["invalid"]
    assert "cut off" in result.state.observations[0].content


def test_an_anthropic_tool_use_cut_off_by_max_tokens_is_never_executed(server):
    """A tool_use whose input still passes the schema, in a max_tokens reply (derived), is answered invalid, not run."""
    recording = _recording("anthropic__test_anthropic_tool_output")
    body = _derived(recording, 0, lambda b: b.update(stop_reason="max_tokens"))
    server.script(json_reply(body), recording.reply(1))
    tools, ran = _counting(recording.registry([]))
    result = run("task", make_adapter(recording, server.url), tools, gate=allow_all, limits=Limits(max_turns=2))
    assert ran == ["final_result"]  # only the next, complete reply's call ran
    assert result.state.observations[0].kind == "invalid"
    assert "cut off" in result.state.observations[0].content
    sent = server.requests[1].body["messages"][-1]["content"][0]
    assert sent["type"] == "tool_result" and sent["is_error"] is True


# --- 3. reasoning parts travel back -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["anthropic__test_anthropic_model_thinking_part", "anthropic__test_anthropic_model_thinking_part_redacted"]
)
def test_anthropic_thinking_blocks_go_back_as_the_recorded_accepted_request_had_them(server, name):
    """The next turn's request carries the signed (or redacted) thinking blocks exactly as the API accepted them."""
    recording = _recording(name)
    server.script(*recording.replies())
    model = make_adapter(recording, server.url)
    first = run("task", model, {}, limits=LIMITS)
    assert first.stop is Stop.ANSWERED
    run("and then?", model, {}, history=first.state.messages, limits=LIMITS)
    ours = next(m for m in server.requests[1].body["messages"] if m["role"] == "assistant")["content"]
    accepted = next(m for m in recording.request(1)["messages"] if m["role"] == "assistant")["content"]
    thinking = [b for b in accepted if b["type"] in ("thinking", "redacted_thinking")]
    assert thinking and [b for b in ours if b["type"] in ("thinking", "redacted_thinking")] == thinking


def test_deepseek_reasoning_content_goes_back_with_the_tool_call(server):
    """DeepSeek's thinking mode needs reasoning_content back beside the call: sent as the recorded request had it."""
    recording = _recording("deepseek__test_deepseek_deferred_capability_with_thinking")
    server.script(*recording.replies())
    run("task", make_adapter(recording, server.url), recording.registry([]), gate=allow_all, limits=LIMITS)
    ours = next(m for m in server.requests[1].body["messages"] if m["role"] == "assistant")
    accepted = next(m for m in recording.request(1)["messages"] if m["role"] == "assistant")
    assert ours["reasoning_content"] == accepted["reasoning_content"]
    assert [c["id"] for c in ours["tool_calls"]] == [c["id"] for c in accepted["tool_calls"]]


def test_gemini_thought_signature_and_a_call_without_id_survive(server):
    """Gemini's extra_content (thought signature) is kept and sent back; its empty call id gets one, echoed back."""
    recording = _recording("gemini__test_compatible_api_with_tool_calls_without_id")
    server.script(*recording.replies())
    result = run("task", make_adapter(recording, server.url), recording.registry([]), gate=allow_all, limits=LIMITS)
    assert result.stop is Stop.ANSWERED
    sent = server.requests[1].body["messages"]
    assistant = next(m for m in sent if m["role"] == "assistant")
    signature = recording.response(0)["choices"][0]["message"]["extra_content"]
    assert assistant["extra_content"] == signature
    call_id = assistant["tool_calls"][0]["id"]
    assert call_id and sent[-1]["tool_call_id"] == call_id


# --- 4. a call without arguments ------------------------------------------------------------------------


def test_a_call_without_an_arguments_field_runs_a_tool_that_takes_none(server):
    """A call to a parameterless tool sent without ``arguments`` (derived from api.openai.com's) runs with {}."""
    recording = _recording("openai__test_openai_tool_output")
    body = _derived(recording, 0, lambda b: b["choices"][0]["message"]["tool_calls"][0]["function"].pop("arguments"))
    server.script(json_reply(body), recording.reply(1))
    tools, ran = _counting(recording.registry([]))
    run("task", make_adapter(recording, server.url), tools, gate=allow_all, limits=Limits(max_turns=2))
    assert ran == ["get_user_country", "final_result"]


# --- 5. pause_turn, and text split by server tools -------------------------------------------------------


def test_pause_turn_is_continued_not_taken_as_the_answer(server):
    """A pause_turn reply is sent back as the assistant's turn so far; the continuation completes one answer."""
    recording = _recording("anthropic__test_pause_turn_web_search_vcr")
    server.script(*recording.replies())
    result = run("task", make_adapter(recording, server.url), {}, limits=LIMITS)
    assert result.stop is Stop.ANSWERED
    assert len(server.requests) == 2
    continued = server.requests[1].body["messages"][-1]
    assert continued == {"role": "assistant", "content": recording.response(0)["content"]}
    assert continued == recording.request(1)["messages"][-1]  # as the API accepted it
    final_texts = [b["text"] for b in recording.response(1)["content"] if b["type"] == "text"]
    assert result.answer.endswith(final_texts[-1])


def test_text_blocks_apart_are_separated_and_cited_pieces_are_not(server):
    """Text before and after server-tool blocks is split by a blank line; adjacent (cited) text blocks run on."""
    recording = _recording("anthropic__test_pause_turn_web_search_vcr")
    server.script(*recording.replies())
    answer = run("task", make_adapter(recording, server.url), {}, limits=LIMITS).answer
    first = recording.response(0)["content"]
    texts = [b["text"] for b in first if b["type"] == "text"]
    assert texts[0] + "\n\n" + texts[1] in answer
    assert texts[0] + texts[1] not in answer


# --- 6. Groq's tool_use_failed -----------------------------------------------------------------------------


def test_groq_tool_use_failed_goes_back_to_the_model_as_an_invalid_observation(server):
    """Groq's HTTP 400 tool_use_failed becomes the model's call, answered invalid; the model corrects itself."""
    recording = _recording("groq__test_tool_use_failed_error")
    server.script(*recording.replies())
    tools, ran = _counting(recording.registry([]))
    result = run("task", make_adapter(recording, server.url), tools, gate=allow_all, limits=LIMITS)
    assert result.stop is Stop.ANSWERED
    assert [o.kind for o in result.state.observations] == ["invalid", "result"]
    assert "get_something_by_name arguments rejected" in result.state.observations[0].content
    assert ran == ["get_something_by_name"]
    ours = next(m for m in server.requests[1].body["messages"] if m["role"] == "assistant")["tool_calls"][0]
    accepted = next(m for m in recording.request(1)["messages"] if m["role"] == "assistant")["tool_calls"][0]
    assert ours["function"]["name"] == accepted["function"]["name"]
    assert json.loads(ours["function"]["arguments"]) == json.loads(accepted["function"]["arguments"])


# --- 7. malformed arguments go back in a form every server accepts ------------------------------------------


def test_unparsable_arguments_go_back_as_an_empty_object_while_the_transcript_keeps_them(server):
    """llama.cpp answers 500 to unparsable arguments: they go back as "{}" (derived from api.openai.com's call)."""
    recording = _recording("openai__test_openai_tool_output")
    broken = '{"country": "Mexi'

    def call(body: Any) -> None:
        body["choices"][0]["message"]["tool_calls"][0]["function"].update(arguments=broken)

    server.script(json_reply(_derived(recording, 0, call)), recording.reply(1))
    result = run("task", make_adapter(recording, server.url), recording.registry([]), limits=Limits(max_turns=2))
    assert result.state.observations[0].kind == "invalid"
    kept = next(m for m in result.state.messages if m["role"] == "assistant")["tool_calls"][0]["function"]
    sent = next(m for m in server.requests[1].body["messages"] if m["role"] == "assistant")["tool_calls"][0]
    assert (kept["arguments"], sent["function"]["arguments"]) == (broken, "{}")


# --- 8. tool names, Azure URLs, the system role ------------------------------------------------------------


@pytest.mark.parametrize("adapter", ["openai", "anthropic", "ollama"])
def test_a_tool_name_the_providers_refuse_ends_before_anything_is_sent(server, adapter):
    """A name outside ^[a-zA-Z0-9_-]{1,64}$ is refused when the run starts, and by every adapter as invalid_request
    when declarations reach it some other way; no request goes out either way."""
    recording = next(r for r in RECORDINGS if r.adapter == adapter)
    tools = {"lookup.order": ToolSpec("d", {}, lambda: None), "x" * 65: ToolSpec("d", {}, lambda: None)}
    with pytest.raises(ToolDefinitionError, match="'lookup.order'"):
        run("task", make_adapter(recording, server.url), tools, limits=LIMITS)
    declarations = [spec.declaration(name) for name, spec in tools.items()]
    with pytest.raises(ProviderFailure) as refused:
        make_adapter(recording, server.url).chat([{"role": "user", "content": "task"}], declarations)
    assert refused.value.kind == "invalid_request" and "'lookup.order'" in str(refused.value)
    assert server.requests == []


def test_azure_deployment_url_api_version_and_api_key_header(server):
    """AzureOpenAIChat posts to the deployment with ?api-version= and sends the key as api-key, not a bearer token."""
    recording = _recording("openai__test_valid_response")
    server.script(recording.reply(0))
    model = AzureOpenAIChat(base_url=server.url, model="gpt-4o-prod", api_version="2024-10-21", api_key=KEY)
    assert run("task", model, {}, limits=LIMITS).stop is Stop.ANSWERED
    request = server.requests[0]
    assert request.path == "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
    assert request.headers["api-key"] == KEY and "authorization" not in request.headers


def test_a_base_url_with_a_query_string_keeps_it(server):
    """OpenAIChat pointed at an Azure-style URL with ?api-version= appends the path before the query."""
    recording = _recording("openai__test_valid_response")
    server.script(recording.reply(0))
    model = OpenAIChat(base_url=server.url + "/openai/deployments/d?api-version=2024-10-21", model="d")
    run("task", model, {}, limits=LIMITS)
    assert server.requests[0].path == "/openai/deployments/d/chat/completions?api-version=2024-10-21"


def test_o1_mini_refuses_system_and_developer_and_takes_the_prompt_as_user(server):
    """The recorded 400s for 'system' and 'developer' end provider_error; system_role='user' is what o1-mini took."""
    for name in ["openai__test_openai_o1_mini_system_role_system", "openai__test_openai_o1_mini_system_role_developer"]:
        recording = _recording(name)
        role = recording.request(0)["messages"][0]["role"]
        server.script(recording.reply(0))
        result = run("task", make_adapter(recording, server.url, system_role=role), {}, limits=LIMITS)
        assert (result.stop, result.state.fault.status) == (Stop.PROVIDER_ERROR, 400)
        assert f"does not support '{role}'" in result.reason
        assert server.requests[-1].body["messages"][0]["role"] == role
    recording = _recording("openai__test_system_prompt_role_o1_mini")
    server.script(recording.reply(0))
    result = run("task", make_adapter(recording, server.url, system_role="user"), {}, limits=LIMITS)
    assert result.stop is Stop.ANSWERED
    assert [m["role"] for m in server.requests[-1].body["messages"]] == ["user", "user"]


# --- 9. deadlines, Retry-After, keys, token counts ----------------------------------------------------------


def test_a_trickling_server_cannot_hold_a_call_past_total_timeout(server):
    """Every read is quick but the whole reply is slow: the call ends timeout at total_timeout, not when it likes."""
    recording = _recording("openai__test_valid_response")
    server.script(trickled(recording.reply(0), 0.2))
    model = make_adapter(recording, server.url, read_timeout=1.0, total_timeout=0.5)
    result = run("task", model, {}, limits=LIMITS)
    assert (result.stop, result.state.fault.kind) == (Stop.PROVIDER_ERROR, "timeout")
    assert "total_timeout=0.5s" in result.reason


def test_retry_after_nan_is_ignored_and_the_backoff_used(server):
    """A 429 with Retry-After: nan is retried after the usual backoff instead of crashing the run."""
    recording = _recording("openai__test_valid_response")
    sleeps: list[float] = []
    limited = json_reply({"error": {"message": "slow down"}}, status=429, headers={"retry-after": "nan"})
    server.script(limited, recording.reply(0))
    model = make_adapter(recording, server.url, max_retries=1, backoff=0.25, sleep=sleeps.append)
    assert run("task", model, {}, limits=LIMITS).stop is Stop.ANSWERED
    assert sleeps == [0.25]


def test_a_key_with_a_newline_is_stripped_and_an_echo_of_it_redacted_everywhere(server, caplog):
    """The header carries the bare key; a server's partial echo (OpenAI's masked form) reaches no message or log."""
    recording = _recording("openai__test_valid_response")
    echoed = f"Incorrect API key provided: {KEY[:8]}{'*' * 20}{KEY[-4:]}. You can find your API key at ..."
    server.script(json_reply({"error": {"message": echoed, "code": "invalid_api_key"}}, status=401))
    caplog.set_level(logging.DEBUG)
    model = make_adapter(recording, server.url, api_key=KEY + "\n")
    result = run("task", model, {}, limits=LIMITS)
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert result.state.fault.status == 401
    saved = result.state.to_json() + result.reason + repr(model) + caplog.text
    assert [KEY[i : i + 6] for i in range(len(KEY) - 5) if KEY[i : i + 6] in saved] == []
    assert "[redacted]" in result.reason


def test_a_provider_reporting_zero_prompt_tokens_does_not_switch_the_budget_off(server):
    """OpenRouter's recorded prompt_tokens 0 is not adopted: the estimate stands and the budget keeps counting."""
    recording = _recording("openrouter__test_openrouter_video_url_public_api")
    assert recording.response(0)["usage"]["prompt_tokens"] == 0
    server.script(recording.reply(0))
    result = run("task", make_adapter(recording, server.url), {}, limits=LIMITS)
    assert result.stop is Stop.ANSWERED
    assert result.state.usage_offset == 0 and result.state.prompt_token_log[0] > 0


def test_anthropic_takes_no_seed_and_maps_tool_choice(server):
    """seed is refused when the adapter is built; tool_choice and parallel_tool_calls land in one tool_choice object."""
    with pytest.raises(ValueError, match="no seed"):
        AnthropicMessages(base_url=server.url, model="m", seed=1)
    recording = _recording("anthropic__test_anthropic_tool_output")
    server.script(recording.reply(0))
    model = make_adapter(recording, server.url, tool_choice="get_user_country", parallel_tool_calls=False)
    run("task", model, recording.registry([]), limits=Limits(max_turns=1))
    expected = {"type": "tool", "name": "get_user_country", "disable_parallel_tool_use": True}
    assert server.requests[0].body["tool_choice"] == expected


def test_openai_tool_choice_parallel_tool_calls_and_seed_reach_the_wire(server):
    """The three options are sent in OpenAI's own form, tool_choice and parallel_tool_calls only with tools."""
    recording = _recording("openai__test_openai_tool_output")
    server.script(recording.reply(0), recording.reply(0))
    model = make_adapter(recording, server.url, tool_choice="required", parallel_tool_calls=False, seed=7)
    run("task", model, recording.registry([]), limits=Limits(max_turns=1))
    body = server.requests[0].body
    assert (body["tool_choice"], body["parallel_tool_calls"], body["seed"]) == ("required", False, 7)
    named = make_adapter(recording, server.url, tool_choice="final_result")
    run("task", named, recording.registry([]), limits=Limits(max_turns=1))
    assert server.requests[1].body["tool_choice"] == {"type": "function", "function": {"name": "final_result"}}


def test_provider_failure_is_what_a_bad_key_raises_outside_a_run(server):
    """Called directly, the adapter raises ProviderFailure with the redacted message (the same the run records)."""
    recording = _recording("openai__test_valid_response")
    server.script(json_reply({"error": {"message": f"bad key {KEY}"}}, status=401))
    with pytest.raises(ProviderFailure) as caught:
        make_adapter(recording, server.url).chat([{"role": "user", "content": "hi"}])
    assert KEY not in caught.value.message and "[redacted]" in caught.value.message


def test_an_implausibly_small_count_never_replaces_the_estimate():
    """A warm-cache count (Ollama counts only newly evaluated tokens) below a quarter of the estimate is not adopted."""
    from agent_fsm import ModelReply

    class Reports:
        def __init__(self, counted: int) -> None:
            self.counted = counted

        def chat(self, messages: Any, tools: Any = ()) -> ModelReply:
            return ModelReply({"role": "assistant", "content": "done"}, prompt_tokens=self.counted, finish="stop")

    small = run("task", Reports(1), {}, limits=LIMITS).state
    assert small.usage_offset == 0 and small.prompt_token_log[0] > 1
    fair = run("task", Reports(500), {}, limits=LIMITS).state
    assert fair.prompt_token_log == [500]


def test_azure_reads_the_official_sdks_environment_names(server, monkeypatch):
    """AZURE_OPENAI_ENDPOINT, AZURE_OPENAI_DEPLOYMENT, AZURE_OPENAI_API_KEY and OPENAI_API_VERSION configure it."""
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", server.url)
    monkeypatch.setenv("AZURE_OPENAI_DEPLOYMENT", "dep-1")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_VERSION", "2025-01-01-preview")
    recording = _recording("openai__test_valid_response")
    server.script(recording.reply(0))
    model = AzureOpenAIChat()
    assert run("task", model, {}, limits=LIMITS).stop is Stop.ANSWERED
    assert server.requests[0].path == "/openai/deployments/dep-1/chat/completions?api-version=2025-01-01-preview"
    assert KEY not in repr(model) and "api-version" not in repr(model)


def test_azure_without_an_api_version_or_endpoint_is_a_configuration_error(monkeypatch):
    """Missing settings are named when the adapter is built, before any run; Azure's /openai/v1 needs no version."""
    monkeypatch.delenv("OPENAI_API_VERSION", raising=False)
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT", raising=False)
    with pytest.raises(ValueError, match="api_version"):
        AzureOpenAIChat(base_url="https://r.openai.azure.com", model="d")
    with pytest.raises(ValueError, match="AZURE_OPENAI_ENDPOINT"):
        AzureOpenAIChat(model="d", api_version="2024-10-21")
    v1 = AzureOpenAIChat(base_url="https://r.openai.azure.com/openai/v1", model="gpt-4o")
    assert v1.base_url == "https://r.openai.azure.com/openai/v1"
