"""
Streamed replies (``stream=True``) give exactly the reply the same response gives whole.

Two directions, both through the real adapters:

* every recorded stream (``fixtures/streams``, real SSE and NDJSON bodies from
  public SDK and framework test suites) is served byte for byte from 127.0.0.1;
  the official SDK reads the same bytes and assembles its message, which is
  then served whole to the non-streaming adapter: the two replies are equal;
* every recorded whole reply is turned into the stream that carries it, its
  text and tool arguments split wherever Hypothesis says: the assembled reply
  equals the whole one, whatever the split and however the bytes are chunked.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_fsm import Limits, ModelReply, Stop, allow_all, run
from agent_fsm.providers._openai_stream import content_text
from tests.nonces import one_nonce

from .loopback import LoopbackServer, json_reply, trickled
from .recordings import RECORDINGS, STREAMS, Recording, is_stream
from .streaming import explode, ollama_whole, sdk_whole
from .test_recorded import make_adapter

ASKED = [{"role": "user", "content": "recorded"}]
BY_NAME = {r.name: r for r in STREAMS}
# Read by their own tests below: the SDK raises on their error events, or its partial JSON parser
# completes a cut-off tool input (the adapter keeps the text instead), or it drops Mistral's thinking parts.
OWN_TESTS = {
    ("groq__test_tool_use_failed_error_streaming", 0),
    ("openrouter__test_openrouter_stream_error", 0),
    ("anthropic__sdk_incomplete_partial_json_response", 0),
    ("mistral__test_mistral_model_thinking_part_iter", 0),
}


def _paused(recording: Recording, index: int) -> bool:
    return (
        index > 0 and is_stream(recording, index - 1) and '"stop_reason":"pause_turn"' in recording.response(index - 1)
    )


def _turn(recording: Recording, index: int) -> list[int]:
    """The interactions one call reads: this one and the continuations of a paused turn."""
    end = index
    while end + 1 < len(recording.interactions) and _paused(recording, end + 1):
        end += 1
    return list(range(index, end + 1))


TURNS = [
    pytest.param(rec, i, id=f"{rec.id}[{i}]")
    for rec in STREAMS
    for i in range(len(rec.interactions))
    if is_stream(rec, i) and not _paused(rec, i) and (rec.name, i) not in OWN_TESTS
]


@pytest.fixture
def oracle_server():
    """A second loopback server, for the SDK's reading of the recording."""
    loopback = LoopbackServer().start()
    yield loopback
    loopback.stop()


def _whole(recording: Recording, index: int, server: LoopbackServer) -> dict[str, Any]:
    return ollama_whole(recording, index) if recording.adapter == "ollama" else sdk_whole(recording, index, server)


def _said(recording: Recording, wholes: list[dict[str, Any]]) -> str:
    """The answer text the streams carry, read from the oracle's whole replies (text only, no reasoning)."""
    if recording.adapter == "openai":
        return content_text(wholes[0]["choices"][0]["message"].get("content") or "")
    if recording.adapter == "anthropic":
        return "".join(b["text"] for w in wholes for b in w["content"] if b["type"] == "text")
    return wholes[0]["message"]["content"]


def test_the_stream_recordings_cover_three_formats_and_name_their_origin():
    """Streams from at least eight hosts over SSE (OpenAI-compatible, Anthropic) and NDJSON, each one listed."""
    listed = _sources()
    assert {r.adapter for r in STREAMS} == {"openai", "anthropic", "ollama"}
    assert len({r.host for r in STREAMS}) >= 8
    for recording in STREAMS:
        assert len(recording.origin["commit"]) == 40, recording.id
        assert f"`streams/{recording.adapter}/{recording.name}.json`" in listed, recording.id


def _sources() -> str:
    from .recordings import FIXTURES

    return (FIXTURES / "SOURCES.md").read_text()


@pytest.mark.parametrize(("recording", "index"), TURNS)
def test_a_recorded_stream_reads_as_the_sdk_assembled_reply_read_whole(server, oracle_server, recording, index):
    """Streamed and whole: the same message, prompt count and finish; the deltas are the answer's text, in order."""
    turn = _turn(recording, index)
    wholes = [_whole(recording, i, oracle_server) for i in turn]
    server.script(*[trickled(recording.reply(i), 0.001) for i in turn])
    heard: list[str] = []
    with make_adapter(recording, server.url, stream=True) as model:
        streamed = model.chat(ASKED, recording.declarations(), on_delta=heard.append)
    assert server.requests[0].body["stream"] is True
    server.script(*[json_reply(w) for w in wholes])
    with make_adapter(recording, server.url) as model:
        whole = model.chat(ASKED, recording.declarations())
    assert isinstance(streamed, ModelReply)
    assert streamed == whole
    assert "".join(heard) == _said(recording, wholes)


@pytest.mark.parametrize(("recording", "index"), TURNS)
def test_achat_reads_a_recorded_stream_as_chat_does_and_awaits_an_async_listener(server, recording, index):
    """``achat`` over the same bytes: the same reply as ``chat``; an ``async`` on_delta hears the same fragments."""
    turn = _turn(recording, index)
    server.script(*[recording.reply(i) for i in turn])
    heard: list[str] = []
    with make_adapter(recording, server.url, stream=True) as model:
        expected = model.chat(ASKED, recording.declarations(), on_delta=heard.append)
    server.script(*[recording.reply(i) for i in turn])
    awaited: list[str] = []

    async def listen(text: str) -> None:
        await asyncio.sleep(0)
        awaited.append(text)

    async def main() -> ModelReply:
        async with make_adapter(recording, server.url, stream=True) as model:
            return await model.achat(ASKED, recording.declarations(), on_delta=listen)

    assert asyncio.run(main()) == expected
    assert awaited == heard


def test_mistral_thinking_parts_stream_into_the_content_parts_of_the_whole_reply(server):
    """Magistral's content parts: the thinking pieces join one ``thinking`` part, the answer one ``text`` part."""
    recording = BY_NAME["mistral__test_mistral_model_thinking_part_iter"]
    chunks = [json.loads(line[6:]) for line in recording.response(0).splitlines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    thinking = "".join(t["text"] for d in deltas if isinstance(d, list) for p in d for t in p["thinking"])
    text = "".join(d for d in deltas if isinstance(d, str))
    server.script(recording.reply(0))
    heard: list[str] = []
    reply = make_adapter(recording, server.url, stream=True).chat(ASKED, on_delta=heard.append)
    parts = [{"type": "thinking", "thinking": [{"type": "text", "text": thinking}]}, {"type": "text", "text": text}]
    assert reply.message["content"] == parts
    assert thinking.startswith("Okay") and text.startswith("To cross the street")
    assert "".join(heard) == text  # the thinking is not the answer's text
    assert (reply.finish, reply.prompt_tokens) == ("stop", 10)


def test_a_tool_input_cut_by_max_tokens_keeps_the_text_the_model_wrote(server):
    """Anthropic's cut-off ``input_json_delta`` pieces: the call's arguments are that text, never a completed object."""
    recording = BY_NAME["anthropic__sdk_incomplete_partial_json_response"]
    events = [json.loads(line[6:]) for line in recording.response(0).splitlines() if line.startswith("data: ")]
    written = "".join(
        e["delta"]["partial_json"] for e in events if e.get("delta", {}).get("type") == "input_json_delta"
    )
    server.script(recording.reply(0))
    reply = make_adapter(recording, server.url, stream=True).chat(ASKED)
    (call,) = reply.message["tool_calls"]
    assert call["function"] == {"name": "make_file", "arguments": written}
    assert reply.finish == "length"


def test_a_streamed_run_answers_after_its_tool_call(server):
    """``run`` over OpenAI's recorded streams: the call whose arguments came in five pieces runs, then the answer."""
    recording = BY_NAME["openai__test_run_stream_sync_streams_real_model"]
    server.script(*recording.replies())
    model = make_adapter(recording, server.url, stream=True)
    result = run("recorded", model, recording.registry([]), gate=allow_all, limits=Limits(max_turns=3))
    assert (result.stop, result.answer) == (Stop.ANSWERED, "The capital of the UK is London.")
    call = result.state.messages[2]["tool_calls"][0]
    assert call["function"] == {"name": "get_capital", "arguments": '{"country":"UK"}'}
    assert result.state.prompt_token_log[:1] == [53]
    assert server.requests[0].body["stream_options"] == {"include_usage": True}


def test_a_server_that_ignores_stream_and_answers_whole_gives_the_same_reply(server):
    """``stream: true`` answered with plain JSON (servers that do not stream): read as the whole reply it is."""
    recording = next(r for r in RECORDINGS if r.name == "openai__sdk_test_parse_pydantic_tool")
    server.script(recording.reply(0), recording.reply(0))
    assert make_adapter(recording, server.url, stream=True).chat(ASKED) == make_adapter(recording, server.url).chat(
        ASKED
    )


# --- the other direction: a whole reply, streamed ---------------------------------------------------------------


def _wholes() -> list[Any]:
    found = []
    for rec in RECORDINGS:
        for i in range(len(rec.interactions)):
            body = rec.response(i)
            ok = rec.interactions[i]["response"]["status"] == 200 and isinstance(body, dict)
            if ok and (rec.adapter != "openai" or body.get("choices")):
                found.append(pytest.param(rec, i, id=f"{rec.id}[{i}]"))
    return found


WHOLES = _wholes()


def _without_call_index(reply: ModelReply) -> ModelReply:
    """``reply`` with no ``index`` on its calls: stream framing that DeepSeek, Hugging Face and Ollama's cloud
    repeat in whole replies (OpenAI does not), and that the assembled reply drops."""
    calls = reply.message.get("tool_calls")
    if not isinstance(calls, list):
        return reply
    stripped = [{k: v for k, v in c.items() if k != "index"} for c in calls]
    return attrs.evolve(reply, message={**reply.message, "tool_calls": stripped})


def _read(model: Any, raw: bytes, sizes: list[int]) -> tuple[ModelReply, list[str]]:
    """Feed ``raw`` to a fresh assembler in pieces of the given sizes; read the assembled body as the adapter does."""
    assembler = model.stream_assembler()
    heard: list[str] = []
    start = 0
    for size in [*sizes, len(raw)]:
        heard += assembler.feed(raw[start : start + max(size, 1)])
        start += max(size, 1)
        if start >= len(raw):
            break
    status, data = assembler.finish()
    return model.read_reply(data, status), heard


@pytest.mark.parametrize(("recording", "index"), WHOLES)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=10**6), max_size=40),
    sizes=st.lists(st.integers(1, 64), max_size=20),
)
def test_any_whole_reply_streamed_in_any_pieces_reads_as_the_whole_reply(recording, index, cuts, sizes):
    """Arguments split across up to 40 deltas, bytes chunked anywhere (mid-character too): the whole reply, exactly."""
    model = make_adapter(recording, "http://127.0.0.1:9", stream=True)
    body = recording.response(index)
    if recording.adapter == "anthropic" and body.get("stop_reason") == "pause_turn":
        body = {**body, "stop_reason": "end_turn"}  # one part of a paused turn, read alone
    whole = model.read_reply(body)
    streamed, heard = _read(model, explode(recording.adapter, body, cuts), sizes)
    assert streamed == _without_call_index(whole)
    if recording.adapter == "anthropic":
        assert "".join(heard) == "".join(b["text"] for b in body["content"] if b["type"] == "text")
    elif recording.adapter == "openai":
        assert "".join(heard) == content_text(body["choices"][0]["message"].get("content") or "")
    else:
        assert "".join(heard) == (body["message"].get("content") or "")


@one_nonce()
def test_astream_over_a_recorded_stream_tells_its_text_as_it_arrives_and_ends_as_run_does(server):
    """The async driver over a real recorded stream: TextDelta events carry the answer's text, before its
    ModelReplied, and the run rests exactly where the sync run over the same bytes rests."""
    from agent_fsm import Ended, ModelReplied, TextDelta, astream

    recording = BY_NAME["openai__test_run_stream_sync_streams_real_model"]
    server.script(*recording.replies())
    plain = run("recorded", make_adapter(recording, server.url, stream=True), recording.registry([]),
                gate=allow_all, limits=Limits(max_turns=3), run_id="r")  # fmt: skip

    async def streamed() -> list[Any]:
        model = make_adapter(recording, server.url, stream=True)
        return [
            e
            async for e in astream(
                "recorded", model, recording.registry([]), gate=allow_all, limits=Limits(max_turns=3), run_id="r"
            )
        ]

    server.script(*recording.replies())
    events = asyncio.run(streamed())
    ended = events[-1]
    assert isinstance(ended, Ended) and ended.result.state.to_json() == plain.state.to_json()
    last_turn = ended.result.state.turns
    deltas = [e for e in events if isinstance(e, TextDelta) and e.turn == last_turn]
    assert "".join(d.text for d in deltas) == plain.answer and len(deltas) > 1
    replied = max(i for i, e in enumerate(events) if isinstance(e, ModelReplied))
    assert all(events.index(d) < replied for d in deltas)
