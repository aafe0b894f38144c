"""
The Responses and Gemini adapters' own paths: typed output, Gemini's schema dialect, and servers that misbehave.

Typed output is checked against the recorded structured-output runs (the
requests the adapters send are compared with the recorded ones); the hostile
servers take a recorded reply and break the one thing at issue (a stream cut
before its end, an error event, a wrong content type, a body trickled past
``total_timeout``), as the tests of the other adapters do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any

import pytest

from agent_fsm import Agent, Limits, ProviderFailure, Stop, ToolSpec
from agent_fsm.engine import output_spec
from agent_fsm.providers import FAILURE_KINDS, GeminiGenerate, OpenAIResponses, ProviderConfigError
from agent_fsm.providers._gemini_schema import gemini_schema

from .loopback import Reply, json_reply, text_reply, trickled, truncated
from .native import make_native, streamed_replies
from .recordings import NATIVE_RECORDINGS
from .test_recorded import KEY
from .test_total_timeout import TOTAL, trickler  # noqa: F401 (the fixture, shared)

BY_NAME = {r.name: r for r in NATIVE_RECORDINGS}
ASKED = [{"role": "user", "content": "recorded"}]


@dataclasses.dataclass
class CityLocation:
    city: str
    country: str


def _country_tool() -> dict[str, ToolSpec]:
    return {"get_user_country": ToolSpec("", {"type": "object", "properties": {}}, lambda: "Mexico")}


@pytest.mark.parametrize("stream", [False, True])
def test_responses_typed_output_goes_as_text_format_and_comes_back_typed(server, stream):
    """gpt-4o's recorded run under ``text.format`` json_schema: a call, then the JSON answer read as the type."""
    recording = BY_NAME["openai__test_native_output"]
    server.script(*(streamed_replies(recording) if stream else recording.replies()))
    model = make_native(recording, server.url, stream=stream)
    result = Agent(model, _country_tool(), output=CityLocation).run("What is the largest city in the user country?")
    assert result.stop is Stop.ANSWERED and result.output == CityLocation("Mexico City", "Mexico")
    sent = server.requests[0].body["text"]["format"]
    recorded = recording.request(0)["text"]["format"]
    assert (sent["type"], sent["name"], sent["strict"]) == (recorded["type"], recorded["name"], recorded["strict"])
    assert sent["schema"]["required"] == recorded["schema"]["required"]


def test_gemini_typed_output_with_tools_is_the_required_final_function(server):
    """Gemini's recorded run: the final function declared beside the tool, mode ANY, its call read as the answer."""
    recording = BY_NAME["google__test_google_tool_output"]
    server.script(*recording.replies())
    model = make_native(recording, server.url)
    result = Agent(model, _country_tool(), output=CityLocation).run("What is the largest city in the user country?")
    assert result.stop is Stop.ANSWERED and result.output == CityLocation("Mexico City", "Mexico")
    sent = server.requests[0].body
    recorded = recording.request(0)
    names = [d["name"] for d in sent["tools"][0]["functionDeclarations"]]
    assert names == [d["name"] for d in recorded["tools"][0]["functionDeclarations"]]
    assert sent["tools"][0]["functionDeclarations"][1]["parameters"]["type"] == "OBJECT"
    assert (
        sent["toolConfig"]["functionCallingConfig"]["mode"] == recorded["toolConfig"]["functionCallingConfig"]["mode"]
    )


def test_gemini_typed_output_without_tools_is_a_response_schema(server):
    """No tools: ``responseMimeType`` JSON and ``responseSchema`` in the dialect, as the recorded request has."""
    recording = BY_NAME["google__test_google_native_output_multiple"]
    server.script(*recording.replies())
    schema = {
        "type": "object",
        "properties": {"result": {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]}},
        "required": ["result"],
    }
    model = make_native(recording, server.url)
    result = Agent(model, {}, output=schema, limits=Limits(max_turns=1)).run("What language is spoken in Mexico?")
    assert result.stop is Stop.ANSWERED and result.output["result"]["kind"] == "CountryLanguage"
    config = server.requests[0].body["generationConfig"]
    recorded = recording.request(0)["generationConfig"]
    assert config["responseMimeType"] == recorded["responseMimeType"] == "application/json"
    assert config["responseSchema"]["type"] == recorded["responseSchema"]["type"] == "OBJECT"


UNEXPRESSIBLE = [
    pytest.param(
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        },
        "recursive",
        id="recursive-ref",
    ),
    pytest.param({"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}]}}}, "'oneOf'", id="oneOf"),
    pytest.param({"type": "object", "additionalProperties": {"type": "string"}}, "open object", id="open-object"),
    pytest.param({"type": "object", "properties": {"a": {"type": ["string", "integer"]}}}, "the type", id="two-types"),
    pytest.param({"type": "object", "properties": {"a": {"enum": [1, 2]}}}, "non-string", id="integer-enum"),
    pytest.param(
        {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}, "uniqueItems", id="unique"
    ),
    pytest.param({"type": "object", "properties": {"a": {}}}, "any type", id="any"),
]


@pytest.mark.parametrize(("schema", "named"), UNEXPRESSIBLE)
def test_a_schema_gemini_cannot_express_is_refused_when_the_agent_is_defined(schema, named):
    """``Agent(GeminiGenerate(...), tools)`` refuses the tool at once, naming it, the keyword and where it is."""
    model = GeminiGenerate(base_url="http://127.0.0.1:9", model="gemini-2.5-flash")
    tools = {"lookup": ToolSpec("look something up", schema, lambda **kw: kw)}
    with pytest.raises(ProviderConfigError, match="lookup") as caught:
        Agent(model, tools)
    assert named in str(caught.value)
    with pytest.raises(ProviderConfigError, match="typed output"):
        Agent(model, {}, output=schema)


@pytest.mark.parametrize(("schema", "named"), UNEXPRESSIBLE[:3])
def test_a_schema_gemini_cannot_express_is_never_sent(server, schema, named):
    """Called directly, the adapter refuses the declarations ``invalid_request`` and sends nothing."""
    model = GeminiGenerate(base_url=server.url, model="gemini-2.5-flash", max_retries=0)
    declaration = {"type": "function", "function": {"name": "lookup", "parameters": schema}}
    with pytest.raises(ProviderFailure) as caught:
        model.chat(ASKED, [declaration])
    assert caught.value.kind == "invalid_request" and named in caught.value.message
    assert server.requests == []


def test_the_dialect_writes_what_it_can_express():
    """Nullable types, ``const``, arrays, string enums, a ``$ref`` to ``$defs``: in Gemini's names, order kept."""
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "name": {"type": ["string", "null"], "description": "who"},
            "kind": {"const": "person"},
            "tags": {"type": "array", "items": {"enum": ["a", "b", None]}, "maxItems": 3},
            "age": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
            "home": {"$ref": "#/$defs/Place"},
        },
        "required": ["name"],
        "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}}}},
    }
    assert gemini_schema(schema) == {
        "type": "OBJECT",
        "properties": {
            "name": {"type": "STRING", "nullable": True, "description": "who"},
            "kind": {"type": "STRING", "enum": ["person"]},
            "tags": {"type": "ARRAY", "maxItems": 3, "items": {"type": "STRING", "enum": ["a", "b"], "nullable": True}},
            "age": {"type": "INTEGER", "minimum": 0, "nullable": True},
            "home": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}},
        },
        "propertyOrdering": ["name", "kind", "tags", "age", "home"],
        "required": ["name"],
    }


STREAMS = {
    "responses": "openai__test_openai_responses_stream",
    "gemini": "google__test_google_model_stream",
}
ENDS = {"responses": "event: response.completed", "gemini": '"finishReason"'}


def _stream_of(adapter: str) -> tuple[Any, str]:
    recording = BY_NAME[STREAMS[adapter]]
    return recording, recording.response(len(recording.interactions) - 1)


def _served(text: str, kind: str = "text/event-stream") -> Reply:
    return Reply(200, text.encode(), (("content-type", kind),))


def _fails(model: Any, **options: Any) -> ProviderFailure:
    with pytest.raises(ProviderFailure) as caught:
        model.chat(ASKED, **options)
    assert caught.value.kind in FAILURE_KINDS and KEY not in caught.value.message
    return caught.value


@pytest.mark.parametrize("adapter", sorted(STREAMS))
def test_a_stream_that_stops_before_its_end_is_truncated(server, adapter):
    """The recorded stream cut before its ending: ``truncated``, though the text so far was heard."""
    recording, text = _stream_of(adapter)
    cut = text[: text.index(ENDS[adapter])]
    cut = cut[: cut.rindex("data:")] if adapter == "gemini" else cut
    server.script(_served(cut))
    heard: list[str] = []
    failure = _fails(make_native(recording, server.url, stream=True), on_delta=heard.append)
    assert failure.kind == "truncated" and "".join(heard)


@pytest.mark.parametrize("adapter", sorted(STREAMS))
def test_a_connection_closed_mid_stream_is_truncated(server, adapter):
    """Content-Length promises more than is sent before the close: ``truncated`` with the status."""
    recording, text = _stream_of(adapter)
    server.script(truncated(_served(text), missing_bytes=200))
    failure = _fails(make_native(recording, server.url, stream=True))
    assert (failure.kind, failure.status) == ("truncated", 200)


ERRORS = {
    "responses": 'event: error\ndata: {"type":"error","code":"server_error","message":"The server had an error"}\n\n',
    "gemini": 'data: {"error": {"code": 503, "message": "The server had an error", "status": "UNAVAILABLE"}}\n\n',
}


@pytest.mark.parametrize("adapter", sorted(STREAMS))
def test_an_error_event_mid_stream_is_a_stream_error(server, adapter):
    """The recorded stream with the server's error in place of its ending: ``stream_error`` naming it."""
    recording, text = _stream_of(adapter)
    cut = text[: text.index(ENDS[adapter])]
    cut = cut[: cut.rindex("data:")] if adapter == "gemini" else cut
    server.script(_served(cut + ERRORS[adapter]))
    failure = _fails(make_native(recording, server.url, stream=True))
    assert failure.kind == "stream_error" and "The server had an error" in failure.message


def test_a_failed_response_event_is_a_stream_error(server):
    """``response.failed`` (the Responses API's own failure ending) is a ``stream_error`` with its reason."""
    recording, text = _stream_of("responses")
    cut = text[: text.index(ENDS["responses"])]
    ending = {
        "type": "response.failed",
        "response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}},
    }
    failed = f"event: response.failed\ndata: {json.dumps(ending)}\n\n"
    server.script(_served(cut + failed))
    failure = _fails(make_native(recording, server.url, stream=True))
    assert failure.kind == "stream_error" and "boom" in failure.message


@pytest.mark.parametrize("adapter", sorted(STREAMS))
@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_that_is_not_the_provider_s_is_a_bad_response(server, adapter, stream):
    """An HTML page with status 200 (a proxy's login page), streamed or not: ``bad_response``, never a reply."""
    recording, _ = _stream_of(adapter)
    server.script(text_reply("<html>please log in</html>"))
    assert _fails(make_native(recording, server.url, stream=stream)).kind == "bad_response"


@pytest.mark.parametrize("adapter", sorted(STREAMS))
def test_a_wrong_json_shape_is_a_bad_response(server, adapter):
    """A JSON object without the provider's fields: ``bad_response`` naming what is missing."""
    recording, _ = _stream_of(adapter)
    server.script(json_reply({"choices": []}))
    failure = _fails(make_native(recording, server.url))
    assert failure.kind == "bad_response" and ("output" in failure.message or "candidates" in failure.message)


@pytest.mark.parametrize("adapter", sorted(STREAMS))
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_total_timeout_holds_against_a_trickled_stream(server, adapter, driver):
    """Every read quick, the whole slow: the call ends ``timeout`` at about ``total_timeout``, sync and async."""
    recording, text = _stream_of(adapter)
    server.script(trickled(_served(text), 0.5))
    model = make_native(recording, server.url, stream=True, total_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(ProviderFailure) as caught:
        if driver == "sync":
            model.chat(ASKED)
        else:
            asyncio.run(model.achat(ASKED))
    assert caught.value.kind == "timeout" and "total_timeout" in caught.value.message
    assert time.monotonic() - started < 2.5


@pytest.mark.parametrize("adapter", sorted(STREAMS))
def test_an_overloaded_server_is_retried_then_answered(server, sleeps, adapter):
    """HTTP 503 then the recorded reply: retried once with the same backoff rules, then the reply."""
    recording = BY_NAME[STREAMS[adapter]]
    server.script(json_reply({"error": {"message": "overloaded"}}, status=503), recording.reply(0))
    model = make_native(recording, server.url, stream=True, max_retries=1, sleep=sleeps.append)
    reply = model.chat(ASKED)
    assert reply.finish in ("stop", "tool_calls") and len(server.requests) == 2 and len(sleeps) == 1


def test_options_the_providers_do_not_take_are_configuration_errors():
    """A seed for Responses, one-call-at-a-time or a bad model name for Gemini: refused when built."""
    with pytest.raises(ProviderConfigError, match="seed"):
        OpenAIResponses(model="m", seed=3)
    with pytest.raises(ProviderConfigError, match="parallel_tool_calls"):
        GeminiGenerate(model="gemini-2.5-flash", parallel_tool_calls=False)
    with pytest.raises(ProviderConfigError, match="model name"):
        GeminiGenerate(model="../../v1/files")
    assert GeminiGenerate(model="models/gemini-2.5-flash").model == "gemini-2.5-flash"


def test_the_gemini_key_goes_in_its_header_and_a_stream_is_asked_by_the_url(server):
    """``x-goog-api-key`` carries the key (never the URL); ``stream=True`` asks ``streamGenerateContent?alt=sse``."""
    recording = BY_NAME["google__test_google_model_stream"]
    server.script(recording.reply(0))
    make_native(recording, server.url, stream=True).chat(ASKED)
    request = server.requests[0]
    assert request.path == "/v1beta/models/recorded-model:streamGenerateContent?alt=sse"
    assert request.headers["x-goog-api-key"] == KEY and KEY not in request.path


def test_output_cap_lands_in_each_provider_s_field(server):
    """``max_output_tokens`` (the run's cap) is ``max_output_tokens`` for Responses, ``maxOutputTokens`` for Gemini."""
    responses = BY_NAME["openai__test_openai_responses_model_simple_response"]
    gemini = BY_NAME["google__test_google_model_max_tokens"]
    server.script(responses.reply(0), gemini.reply(0))
    make_native(responses, server.url).chat(ASKED, max_output_tokens=64)
    make_native(gemini, server.url).chat(ASKED, max_output_tokens=64)
    assert server.requests[0].body["max_output_tokens"] == 64
    assert server.requests[1].body["generationConfig"]["maxOutputTokens"] == 64


@pytest.mark.parametrize("adapter", sorted(STREAMS))
def test_total_timeout_holds_against_trickled_headers(trickler, adapter):  # noqa: F811
    """However slowly the status line and headers come, the call ends ``timeout`` at about ``total_timeout``."""
    recording, _ = _stream_of(adapter)
    model = make_native(recording, trickler.url.removesuffix("/v1"), stream=True, total_timeout=TOTAL)
    started = time.monotonic()
    with pytest.raises(ProviderFailure) as caught:
        model.chat(ASKED)
    assert caught.value.kind == "timeout" and f"total_timeout={TOTAL:g}s" in caught.value.message
    assert time.monotonic() - started < TOTAL + 1.5


def test_a_final_call_beside_a_signed_call_keeps_the_signature(server):
    """Gemini calling the final function beside a tool: the signed part is kept to be sent back, the final one not."""
    recording = BY_NAME["google__test_google_text_output_function"]
    body = json.loads(json.dumps(recording.response(0)))
    signed = body["candidates"][0]["content"]["parts"][0]
    final = {"functionCall": {"name": "final_result", "args": {"city": "Mexico City", "country": "Mexico"}}}
    body["candidates"][0]["content"]["parts"].append(final)
    server.script(json_reply(body))
    model = make_native(recording, server.url)
    reply = model.chat(ASKED, list(_declarations()), output=output_spec(CityLocation))
    assert [c["function"]["name"] for c in reply.message["tool_calls"]] == ["get_user_country"]
    assert reply.message["gemini_parts"] == [signed]


def _declarations() -> list[dict[str, Any]]:
    return [spec.declaration(name) for name, spec in _country_tool().items()]


@pytest.mark.parametrize("adapter", sorted(STREAMS))
def test_a_stream_where_a_whole_reply_was_asked_is_a_bad_response(server, adapter):
    """The recorded event stream served to an adapter that did not ask for one: ``bad_response``, never a reply."""
    recording, _ = _stream_of(adapter)
    server.script(recording.reply(0))
    assert _fails(make_native(recording, server.url)).kind == "bad_response"


def test_a_failed_response_body_is_a_bad_response(server):
    """A whole reply with ``status: failed`` (its ``error`` filled) ends the call typed, naming the error."""
    recording = BY_NAME["openai__test_openai_responses_model_simple_response"]
    body = json.loads(json.dumps(recording.response(0)))
    body.update(status="failed", output=[], error={"code": "server_error", "message": "The model crashed"})
    server.script(json_reply(body))
    failure = _fails(make_native(recording, server.url))
    assert failure.kind == "bad_response" and "The model crashed" in failure.message


@pytest.mark.parametrize(
    ("choice", "responses", "gemini"),
    [
        ("auto", "auto", {"mode": "AUTO"}),
        ("none", "none", {"mode": "NONE"}),
        ("required", "required", {"mode": "ANY"}),
        ("look", {"type": "function", "name": "look"}, {"mode": "ANY", "allowedFunctionNames": ["look"]}),
    ],
)
def test_tool_choice_in_each_api_s_own_form(choice, responses, gemini):
    """``tool_choice`` as the Responses API's ``tool_choice`` and Gemini's ``functionCallingConfig``."""
    tools = [{"type": "function", "function": {"name": "look", "parameters": {"type": "object", "properties": {}}}}]
    asked = [{"role": "user", "content": "hi"}]
    sent = OpenAIResponses(model="m", tool_choice=choice, parallel_tool_calls=True).request_body(asked, tools)
    assert (sent["tool_choice"], sent["parallel_tool_calls"]) == (responses, True)
    config = GeminiGenerate(model="gemini-2.5-flash", tool_choice=choice).request_body(asked, tools)["toolConfig"]
    assert config == {"functionCallingConfig": gemini}


MALFORMED = [
    pytest.param("responses", '"type":"response.created",', '"type":"response.created",,', id="responses-broken-json"),
    pytest.param(
        "responses", 'data: {"type":"response.created"', 'data: ["response.created"', id="responses-not-object"
    ),
    pytest.param("responses", '"output_index":0', '"output_index":"0"', id="responses-bad-index"),
    pytest.param("gemini", '"candidates": [{', '"candidates": {"x": [{', id="gemini-bad-candidates"),
    pytest.param("gemini", 'data: {"candidates"', 'data: {{"candidates"', id="gemini-broken-json"),
]


@pytest.mark.parametrize(("adapter", "old", "new"), MALFORMED)
def test_a_malformed_event_is_a_bad_response_never_a_reply(server, adapter, old, new):
    """The recorded stream with one event broken (not JSON, not an object, a bad index): ``bad_response``."""
    recording, text = _stream_of(adapter)
    assert old in text
    server.script(_served(text.replace(old, new, 1)))
    assert _fails(make_native(recording, server.url, stream=True)).kind == "bad_response"


@pytest.mark.parametrize("adapter", sorted(STREAMS))
def test_bytes_that_are_not_utf8_are_a_bad_response(server, adapter):
    """A stream with a byte that is not UTF-8 in an event: ``bad_response``."""
    recording, text = _stream_of(adapter)
    raw = text.encode()
    cut = raw.index(b"data:") + 5
    server.script(Reply(200, raw[:cut] + b"\xff\xfe" + raw[cut:], (("content-type", "text/event-stream"),)))
    assert _fails(make_native(recording, server.url, stream=True)).kind == "bad_response"
