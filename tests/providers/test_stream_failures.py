"""
A stream that goes wrong gives a typed ``ProviderFailure``: never a crash, never a made-up answer.

Real error events (Groq's ``tool_use_failed``, OpenRouter's mid-stream ``error``)
are replayed as recorded; the other breakages (a cut, a malformed line, an error
event after text) take a recorded stream and change the one thing at issue.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_fsm import ProviderFailure
from agent_fsm.providers import FAILURE_KINDS
from agent_fsm.providers._sse import StreamBroken

from .loopback import Reply, json_reply, truncated
from .recordings import STREAMS, Recording, is_stream
from .test_recorded import KEY, make_adapter

ASKED = [{"role": "user", "content": "recorded"}]
BY_NAME = {r.name: r for r in STREAMS}
OVERLOADED = 'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'


def _stream(name: str, index: int = 0) -> tuple[Recording, str]:
    recording = BY_NAME[name]
    return recording, recording.response(index)


def _served(recording: Recording, text: str) -> Reply:
    """``text`` as a streamed response, with the recording's content type."""
    return Reply(200, text.encode(), (("content-type", recording.interactions[0]["response"]["content_type"]),))


def _fails(model, **options) -> ProviderFailure:
    with pytest.raises(ProviderFailure) as caught:
        model.chat(ASKED, **options)
    assert caught.value.kind in FAILURE_KINDS
    assert KEY not in caught.value.message
    return caught.value


def test_a_streamed_tool_use_failed_reads_as_the_same_error_answered_whole(server):
    """Groq's ``event: error`` with ``tool_use_failed``: the failed call, exactly as its HTTP 400 reads whole."""
    recording, text = _stream("groq__test_tool_use_failed_error_streaming")
    error = json.loads(text[text.index("event: error") :].split("data: ", 1)[1].split("\n", 1)[0])
    server.script(recording.reply(0), json_reply(error, status=400))
    streamed = make_adapter(recording, server.url, stream=True).chat(ASKED)
    whole = make_adapter(recording, server.url).chat(ASKED)
    assert streamed == whole
    (call,) = streamed.message["tool_calls"]
    assert call["function"]["name"] == "get_something_by_name" and streamed.finish == "tool_calls"


def test_an_error_chunk_mid_stream_is_a_stream_error_not_retried_by_default(server):
    """OpenRouter's chunk with ``error`` after reasoning: ``stream_error`` with the server's words, one request."""
    recording, _ = _stream("openrouter__test_openrouter_stream_error")
    server.script(recording.reply(0), recording.reply(0))
    failure = _fails(make_adapter(recording, server.url, stream=True, max_retries=2))
    assert (failure.kind, failure.status) == ("stream_error", 200)
    assert "Token limit reached" in failure.message
    assert len(server.requests) == 1


def test_an_error_before_any_text_is_retried_when_a_repeat_is_accepted(server, sleeps):
    """With ``retry_unknown_outcome`` and nothing yet shown to the listener, the stream is asked for again."""
    recording, _ = _stream("openrouter__test_openrouter_stream_error")
    server.script(recording.reply(0), recording.reply(0))
    model = make_adapter(recording, server.url, stream=True, max_retries=1, retry_unknown_outcome=True)
    model._http.sleep = sleeps.append
    heard: list[str] = []
    failure = _fails(model, on_delta=heard.append)
    assert failure.kind == "stream_error" and "gave up after 2 attempts" in failure.message
    assert (len(server.requests), sleeps, heard) == (2, [0.5], [])


def test_an_error_event_after_text_ends_the_reply_and_is_never_retried(server):
    """Anthropic's documented ``overloaded_error`` after the first text delta: ``stream_error``, the text heard."""
    recording, text = _stream("anthropic__sdk_tool_use_response")
    first = text.index('"text_delta"')
    cut = text.index("\n\n", first) + 2
    server.script(_served(recording, text[:cut] + OVERLOADED), recording.reply(0))
    heard: list[str] = []
    model = make_adapter(recording, server.url, stream=True, max_retries=2, retry_unknown_outcome=True)
    failure = _fails(model, on_delta=heard.append)
    assert (failure.kind, failure.status, heard) == ("stream_error", 200, ["I"])
    assert "Overloaded" in failure.message and len(server.requests) == 1


def test_a_key_echoed_in_an_error_event_is_blanked(server):
    """A server that quotes the key in its error event: the failure message shows ``[redacted]``, never the key."""
    recording, text = _stream("anthropic__sdk_tool_use_response")
    echo = OVERLOADED.replace("Overloaded", f"bad key {KEY[:-4]}****")
    server.script(_served(recording, text[: text.index("event: content_block_start")] + echo))
    failure = _fails(make_adapter(recording, server.url, stream=True))
    assert "[redacted]" in failure.message and KEY[:12] not in failure.message


CUTS = [pytest.param(r, i, id=f"{r.id}[{i}]") for r in STREAMS for i in range(len(r.interactions)) if is_stream(r, i)]


@pytest.mark.parametrize(("recording", "index"), CUTS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
def test_a_stream_cut_anywhere_is_truncated_or_the_whole_reply(recording, index, where):
    """Any prefix of a recorded stream: ``truncated``, or (cut after the end) the very reply of the whole stream."""
    raw = recording.response(index).encode()
    model = make_adapter(recording, "http://127.0.0.1:9", stream=True)

    def read(data: bytes):
        assembler = model.stream_assembler()
        assembler.feed(data)
        return assembler.finish()

    try:
        complete = read(raw)
    except StreamBroken as broken:
        assert broken.kind == "stream_error"  # the recorded error streams: an error, cut or not
        return
    try:
        status, data = read(raw[: int(len(raw) * where)])
    except StreamBroken as broken:
        assert broken.kind in ("truncated", "stream_error"), broken.what
        return
    whole = model.read_reply(complete[1], complete[0])
    cut = model.read_reply(data, status)
    assert (cut.message, cut.finish) == (whole.message, whole.finish)
    assert cut.prompt_tokens in (whole.prompt_tokens, None)  # only the usage chunk after the end may be missing


def test_a_connection_closed_mid_stream_is_truncated(server):
    """Content-Length promises more than the server sends before closing: ``truncated`` with the status, no reply."""
    recording, _ = _stream("openai__test_run_stream_sync_streams_real_model")
    server.script(truncated(recording.reply(0), missing_bytes=200))
    failure = _fails(make_adapter(recording, server.url, stream=True))
    assert (failure.kind, failure.status) == ("truncated", 200)


def test_a_stream_that_stops_before_its_end_is_truncated(server):
    """An honest body that simply ends before ``message_stop``: ``truncated``, not the text so far."""
    recording, text = _stream("anthropic__sdk_tool_use_response")
    server.script(_served(recording, text[: text.index("event: message_delta")]))
    heard: list[str] = []
    failure = _fails(make_adapter(recording, server.url, stream=True), on_delta=heard.append)
    assert (failure.kind, "".join(heard)) == ("truncated", "I'll check the current weather in Paris for you.")
    assert "message_stop" in failure.message


MALFORMED = [
    pytest.param(
        "openai__test_openai_moderation_stream", '"content":"Paris"', '"content":"Paris', id="openai-broken-json"
    ),
    pytest.param("openai__test_openai_moderation_stream", 'data: {"id"', 'data: ["id"', id="openai-not-an-object"),
    pytest.param(
        "anthropic__sdk_tool_use_response", '"index":1,"delta"', '"index":7,"delta"', id="anthropic-unknown-block"
    ),
    pytest.param(
        "anthropic__sdk_tool_use_response", '"index":0,"delta"', '"index":"0","delta"', id="anthropic-bad-index"
    ),
    pytest.param("ollama__docs_streaming", '"content":"The"', '"content":"The"}}\n{oops', id="ollama-broken-line"),
]


@pytest.mark.parametrize(("name", "old", "new"), MALFORMED)
def test_a_malformed_line_is_a_bad_response_never_a_reply(server, name, old, new):
    """A chunk that is not JSON, not an object, or names a block that never started: ``bad_response``, status 200."""
    recording, text = _stream(name)
    assert old in text
    server.script(_served(recording, text.replace(old, new, 1)))
    failure = _fails(make_adapter(recording, server.url, stream=True))
    assert (failure.kind, failure.status) == ("bad_response", 200)


def test_bytes_that_are_not_utf8_are_a_bad_response(server):
    """A line with an invalid UTF-8 byte: ``bad_response``, under ``achat`` too."""
    recording, text = _stream("openai__test_openai_moderation_stream")
    raw = text.encode().replace(b'"Paris"', b'"Par\xffis"', 1)
    server.script(
        Reply(200, raw, (("content-type", "text/event-stream"),)),
        Reply(200, raw, (("content-type", "text/event-stream"),)),
    )
    assert _fails(make_adapter(recording, server.url, stream=True)).kind == "bad_response"

    async def main() -> None:
        async with make_adapter(recording, server.url, stream=True) as model:
            await model.achat(ASKED)

    with pytest.raises(ProviderFailure) as caught:
        asyncio.run(main())
    assert caught.value.kind == "bad_response"


def test_a_retried_stream_reports_only_the_attempt_that_answered(server, sleeps):
    """HTTP 503 then the stream: one retry, and the listener hears the answer once."""
    recording, _ = _stream("openai__test_openai_moderation_stream")
    server.script(json_reply({"error": {"message": "busy"}}, status=503), recording.reply(0))
    model = make_adapter(recording, server.url, stream=True, max_retries=1)
    model._http.sleep = sleeps.append
    heard: list[str] = []
    reply = model.chat(ASKED, on_delta=heard.append)
    assert (reply.message["content"], heard, sleeps) == ("Paris.", ["Paris", "."], [0.5])


def test_a_listener_that_raises_stops_the_call_with_its_own_error(server):
    """A programmer error in ``on_delta`` is not a provider failure: it propagates as raised, the response closed."""
    recording, _ = _stream("openai__test_openai_moderation_stream")
    server.script(recording.reply(0))

    def listener(text: str) -> None:
        raise LookupError(f"listener broke on {text!r}")

    with pytest.raises(LookupError, match="Paris"):
        make_adapter(recording, server.url, stream=True).chat(ASKED, on_delta=listener)
