"""
Every recorded server reply, replayed from 127.0.0.1 through the real adapters and through ``run``.

The fixtures are real responses from api.openai.com, api.anthropic.com, Ollama and
OpenAI-compatible hosts (see ``fixtures/SOURCES.md``). Whatever a server sent, the
adapter gives a typed answer: a reply whose text, calls, reasoning and finish are the
recorded ones, or a ``ProviderFailure`` of a documented kind; and a run over the
recording ends in a typed stop with every proposal answered and the key nowhere.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_fsm import Limits, ModelReply, ProviderFailure, Stop, allow_all, run
from agent_fsm.providers import FAILURE_KINDS, AnthropicMessages, OllamaChat, OpenAIChat

from .recordings import FIXTURES, RECORDINGS, Recording

KEY = "sk-proj-Zq8WvT3nLx0RkY5bHc2MdP7eJf4G"
_OPENAI_FINISH = {"stop": "stop", "tool_calls": "tool_calls", "length": "length", "content_filter": "content_filter"}
_ANTHROPIC_FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length", "refusal": "refusal"}
EXTRAS = ("reasoning_content", "reasoning", "reasoning_details", "refusal", "extra_content")


def recorded_settings(**options: Any) -> dict[str, Any]:
    """An adapter's settings for a replay: a made-up model and key, no retries, no waiting; ``options`` win."""
    return {
        "model": "recorded-model",
        "api_key": KEY,
        "read_timeout": 5.0,
        "max_retries": 0,
        "sleep": lambda seconds: None,
        **options,
    }


def make_adapter(recording: Recording, url: str, **options: Any) -> OpenAIChat | AnthropicMessages | OllamaChat:
    """The adapter that speaks ``recording``'s wire format, pointed at ``url``."""
    settings = recorded_settings(**options)
    if recording.adapter == "openai":
        return OpenAIChat(base_url=url + "/v1", **settings)
    if recording.adapter == "anthropic":
        return AnthropicMessages(base_url=url, **settings)
    return OllamaChat(base_url=url, **settings)


def _paused(recording: Recording, index: int) -> bool:
    body = recording.response(index)
    return isinstance(body, dict) and body.get("stop_reason") == "pause_turn"


def _expected(recording: Recording, index: int) -> dict[str, Any] | None:
    """What the recorded body says, read independently of the adapters (``None``: an HTTP failure)."""
    body = recording.response(index)
    status = recording.interactions[index]["response"]["status"]
    if recording.adapter == "openai":
        if status >= 400:
            error = body.get("error") if isinstance(body, dict) else None
            if isinstance(error, dict) and error.get("code") == "tool_use_failed":
                return {"finish": "tool_calls", "calls": None, "text": None, "usage": None}
            return None
        choice = body["choices"][0]
        message = choice["message"]
        finish = "refusal" if message.get("refusal") else _OPENAI_FINISH.get(choice.get("finish_reason"))
        calls = [(c.get("id"), c["function"]["name"]) for c in message.get("tool_calls") or []]
        extras = {k: message[k] for k in EXTRAS if message.get(k) is not None}
        usage = (body.get("usage") or {}).get("prompt_tokens")
        return {"finish": finish, "calls": calls, "text": message.get("content"), "extras": extras, "usage": usage}
    if recording.adapter == "anthropic":
        if status >= 400:
            return None
        end = index
        while _paused(recording, end):
            end += 1
        blocks = [b for i in range(index, end + 1) for b in recording.response(i)["content"]]
        body = recording.response(end)
        calls = [(b["id"], b["name"]) for b in blocks if b["type"] == "tool_use"]
        usage = body["usage"]
        counted = sum(
            usage.get(k) or 0 for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        return {
            "finish": _ANTHROPIC_FINISH.get(body["stop_reason"]),
            "calls": calls,
            "texts": [b["text"] for b in blocks if b["type"] == "text"],
            "usage": counted,
        }
    message = body["message"]
    calls = [(None, c["function"]["name"]) for c in message.get("tool_calls") or []]
    finish = "tool_calls" if calls else ("length" if body.get("done_reason") == "length" else "stop")
    return {"finish": finish, "calls": calls, "text": message.get("content"), "usage": body.get("prompt_eval_count")}


EXCHANGES = [
    pytest.param(rec, i, id=f"{rec.id}[{i}]")
    for rec in RECORDINGS
    for i in range(len(rec.interactions))
    if not (i > 0 and _paused(rec, i - 1))  # a continuation is read together with its paused part
]


def test_the_recordings_cover_three_adapters_and_six_compatible_hosts():
    """At least 40 recordings over the three wire formats, from at least six OpenAI-compatible hosts besides OpenAI."""
    assert len(RECORDINGS) >= 40
    assert {r.adapter for r in RECORDINGS} == {"openai", "anthropic", "ollama"}
    hosts = {r.host for r in RECORDINGS if r.adapter == "openai"} - {"openai"}
    assert len(hosts) >= 6, hosts


def test_every_recording_names_its_origin():
    """Each fixture says which repository, path and commit it was copied from, and SOURCES.md lists it."""
    listed = (FIXTURES / "SOURCES.md").read_text()
    for recording in RECORDINGS:
        assert set(recording.origin) >= {"repo", "path", "commit"}, recording.id
        assert len(recording.origin["commit"]) == 40, recording.id
        assert f"`{recording.adapter}/{recording.name}.json`" in listed, recording.id


@pytest.mark.parametrize(("recording", "index"), EXCHANGES)
def test_every_recorded_reply_reads_to_what_the_server_said(server, recording, index):
    """Text, calls (ids and names), reasoning parts, finish and prompt count as recorded; or a typed HTTP failure."""
    server.script(*[recording.reply(i) for i in range(index, len(recording.interactions))])
    model = make_adapter(recording, server.url)
    streamed = isinstance(recording.response(index), str)  # a server that streams although asked not to
    expected = None if streamed else _expected(recording, index)
    try:
        reply = model.chat([{"role": "user", "content": "recorded"}], recording.declarations())
    except ProviderFailure as failure:
        assert expected is None, failure.message
        assert failure.kind == ("bad_response" if streamed else "http") and failure.kind in FAILURE_KINDS
        assert failure.status == recording.interactions[index]["response"]["status"]
        assert KEY not in failure.message
        return
    assert expected is not None, "a recorded HTTP error was read as a reply"
    assert isinstance(reply, ModelReply)
    message = reply.message
    assert reply.finish == expected["finish"]
    if expected["calls"] is not None:
        got = [(c.get("id"), c["function"]["name"]) for c in message.get("tool_calls") or []]
        if recording.adapter == "ollama":
            got = [(None, name) for _, name in got]
        assert got == expected["calls"]
        for call in message.get("tool_calls") or []:
            assert isinstance(json.loads(call["function"]["arguments"]), dict)  # arguments always a JSON object string
    if recording.adapter == "anthropic":
        content = message["content"] or ""
        position = 0
        for text in expected["texts"]:
            found = content.find(text, position)
            assert found >= 0, text
            position = found + len(text)
    else:
        assert message["content"] == expected["text"]
    for key, value in expected.get("extras", {}).items():
        assert message[key] == value, key  # reasoning and signatures kept exactly
    usage = expected["usage"]
    assert reply.prompt_tokens == (usage if isinstance(usage, int) and usage > 0 else None)


RUNS = [pytest.param(rec, id=rec.id) for rec in RECORDINGS if rec.interactions[0]["response"]["status"] < 500]


def _calls_of(recording: Recording, index: int) -> list[str]:
    body = recording.response(index)
    if isinstance(body, str):
        return []
    if recording.adapter == "anthropic" and isinstance(body, dict):
        return [b["id"] for b in body.get("content", []) if b.get("type") == "tool_use"]
    if recording.adapter == "openai" and isinstance(body, dict) and body.get("choices"):
        return [c.get("id") for c in body["choices"][0]["message"].get("tool_calls") or []]
    return []


@pytest.mark.parametrize("recording", RUNS)
def test_every_recording_runs_to_a_typed_ending(server, recording):
    """``run`` over the recorded replies ends in a typed stop, answers every proposal, and never shows the key."""
    server.script(*recording.replies())
    model = make_adapter(recording, server.url)
    tools = recording.registry([])
    limits = Limits(max_turns=len(recording.interactions), max_prompt_tokens=10**7)
    result = run("recorded task", model, tools, gate=allow_all, limits=limits)
    assert isinstance(result.stop, Stop)
    state = result.state
    assert [m["role"] for m in state.messages[:2]] == ["system", "user"]
    proposed = [c["id"] for m in state.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in state.messages if m["role"] == "tool"]
    assert proposed == answered
    assert len(server.requests) <= len(recording.interactions)
    assert KEY not in state.to_json() and KEY not in repr(model)
    if result.stop is Stop.PROVIDER_ERROR:
        assert state.fault is not None and state.fault.kind in FAILURE_KINDS


SENT_BACK = [
    pytest.param(rec, id=rec.id)
    for rec in RECORDINGS
    if len(rec.interactions) > 1 and _calls_of(rec, 0) and rec.interactions[1]["response"]["status"] == 200
]


@pytest.mark.parametrize("recording", SENT_BACK)
def test_a_recorded_call_goes_back_with_its_id_its_result_and_its_provider_parts(server, recording):
    """The second request carries the first reply's calls (same ids), a result for each, and its reasoning as it was."""
    server.script(*recording.replies())
    model = make_adapter(recording, server.url)
    run(
        "recorded task",
        model,
        recording.registry([]),
        gate=allow_all,
        limits=Limits(max_turns=2, max_prompt_tokens=10**7),
    )
    assert len(server.requests) == 2
    sent = server.requests[1].body["messages"]
    first = recording.response(0)
    ids = [i or None for i in _calls_of(recording, 0)]
    if recording.adapter == "openai":
        assistant = next(m for m in sent if m["role"] == "assistant")
        if all(ids):
            assert [c["id"] for c in assistant["tool_calls"]] == ids
        assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == [c["id"] for c in assistant["tool_calls"]]
        recorded = first["choices"][0]["message"]
        for key in EXTRAS:
            if recorded.get(key) is not None:
                assert assistant[key] == recorded[key], key
        for call, sent_call in zip(recorded["tool_calls"], assistant["tool_calls"], strict=True):
            if "extra_content" in call:
                assert sent_call["extra_content"] == call["extra_content"]
    else:
        assistant = next(m for m in sent if m["role"] == "assistant")
        blocks = [b for b in first["content"]]
        if any(b["type"] not in ("text", "tool_use") for b in blocks):
            assert assistant["content"] == blocks  # thinking and server-tool blocks sent back exactly
        assert [b["id"] for b in assistant["content"] if b["type"] == "tool_use"] == ids
        results = [
            b["tool_use_id"] for m in sent if m["role"] == "user" for b in m["content"] if b["type"] == "tool_result"
        ]
        assert results == ids
