"""
Images and files sent through the adapters, checked against the requests the providers accepted.

Each recording (``fixtures/SOURCES.md``) holds a request a provider answered with an
image or a PDF in it: the adapter, given the same task as :class:`agent_fsm.Image` /
:class:`agent_fsm.File` parts, must write the same content; the recorded reply is
replayed from 127.0.0.1 through ``run`` and ``arun``, and streamed.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from agent_fsm import File, Image, ProviderFailure, Stop, arun, run
from agent_fsm.engine import placeholder
from agent_fsm.providers import AnthropicMessages, OllamaChat, OpenAIChat
from tests.media import png

from .loopback import Reply
from .native import explode as native_explode
from .native import make_native
from .recordings import FIXTURES, Recording, load_recordings
from .streaming import explode
from .test_recorded import recorded_settings

BY_NAME = {r.name: r for r in load_recordings(FIXTURES, ("openai", "anthropic"))}


def _recording(name: str) -> Recording:
    return BY_NAME[name]


def _decoded(url: str) -> tuple[str, bytes]:
    head, data = url.split(",", 1)
    return head.removeprefix("data:").removesuffix(";base64"), base64.b64decode(data)


def _chat_task(recording: Recording) -> tuple[list[Any], list[dict[str, Any]]]:
    """The recorded last user message as a task of text, Image and File; the messages before it as history."""
    messages = recording.request(len(recording.interactions) - 1)["messages"]
    task: list[Any] = []
    for part in messages[-1]["content"]:
        if part["type"] == "text":
            task.append(part["text"])
        elif part["type"] == "image_url":
            url = part["image_url"]["url"]
            if url.startswith("data:"):
                media_type, data = _decoded(url)
                task.append(Image(data=data, media_type=media_type))
            else:
                task.append(Image(url=url))
        else:
            media_type, data = _decoded(part["file"]["file_data"])
            task.append(File(data=data, media_type=media_type, name=part["file"]["filename"]))
    return task, messages[:-1]


CHAT = ["openai__test_image_url_input_force_download", "openai__test_document_as_binary_content_input",
        "openai__test_image_url_tool_response"]  # fmt: skip


def _chat(server: Any, **options: Any) -> OpenAIChat:
    return OpenAIChat(base_url=server.url + "/v1", **recorded_settings(**options))


@pytest.mark.parametrize("name", CHAT)
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_chat_sends_images_and_files_as_the_api_accepted_them(server, name, driver):
    """The request's messages are the recorded ones, part for part; the recorded answer ends the run."""
    recording = _recording(name)
    last = len(recording.interactions) - 1
    server.script(recording.reply(last))
    task, history = _chat_task(recording)
    options = {"system_prompt": "", "history": history}
    model = _chat(server)
    result = run(task, model, {}, **options) if driver == "sync" else asyncio.run(arun(task, model, {}, **options))
    assert result.stop is Stop.ANSWERED
    assert result.answer == recording.response(last)["choices"][0]["message"]["content"]
    sent = server.requests[0].body["messages"]
    assert sent[-1] == recording.request(last)["messages"][-1]
    assert [m["role"] for m in sent] == [m["role"] for m in recording.request(last)["messages"]]


def test_chat_streams_with_an_image_in_the_task(server):
    """Streamed, the same request carries the image, and the streamed answer is the recorded text."""
    recording = _recording("openai__test_image_url_input_force_download")
    body = recording.response(0)
    server.script(Reply(200, explode("openai", body, [7, 19]), (("Content-Type", "text/event-stream"),)))
    task, _ = _chat_task(recording)
    result = run(task, _chat(server, stream=True), {}, system_prompt="")
    assert result.answer == body["choices"][0]["message"]["content"]
    assert server.requests[0].body["messages"][-1] == recording.request(0)["messages"][-1]
    assert server.requests[0].body["stream"] is True


def test_chat_refuses_a_file_given_by_url_typed_and_sends_nothing(server):
    """Chat Completions takes a PDF only as bytes: a URL is refused before any request, naming the part."""
    pdf = File(url="https://example.com/report.pdf")
    result = run(["Summarise this.", pdf], _chat(server), {})
    assert result.stop is Stop.PROVIDER_ERROR
    assert result.state.fault is not None and result.state.fault.kind == "invalid_request"
    assert placeholder(pdf.part) in result.state.fault.message
    assert server.requests == []


def test_chat_refuses_an_image_in_a_system_message(server):
    """An image in a history's system message cannot be sent to Chat Completions: typed, and never sent."""
    image = Image(url="https://example.com/a.png")
    history = [{"role": "system", "content": ["Brand guide:", image]}]
    with pytest.raises(ProviderFailure, match="in a system message"):
        _chat(server).chat(run_history(history), [])
    assert server.requests == []


def run_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript a run would hold for ``history`` and a plain task."""
    from agent_fsm.engine._launch import start_state

    return start_state("Go.", history=history).messages


def test_the_recordings_hold_real_base64_media():
    """The fixtures carry the providers' own bytes: a JPEG and a PDF, decoded from the recorded requests."""
    image = _recording("openai__test_image_url_input_force_download").request(0)["messages"][0]["content"][1]
    media_type, data = _decoded(image["image_url"]["url"])
    assert media_type == "image/jpeg" and data[:2] == b"\xff\xd8"
    document = _recording("openai__test_document_as_binary_content_input").request(0)["messages"][0]["content"][1]
    assert _decoded(document["file"]["file_data"])[1].startswith(b"%PDF")
    assert json.dumps(document).count("base64") == 1


def _anthropic_item(block: dict[str, Any]) -> Any:
    """A recorded Anthropic content block as the task item that stands for it."""
    if block["type"] == "text":
        return block["text"]
    source = block["source"]
    make = Image if block["type"] == "image" else File
    if source["type"] == "url":
        return make(url=source["url"])
    return make(data=base64.b64decode(source["data"]), media_type=source["media_type"])


ANTHROPIC = ["anthropic__test_image_url_input", "anthropic__test_document_binary_content_input",
             "anthropic__test_document_url_input"]  # fmt: skip


@pytest.mark.parametrize("name", ANTHROPIC)
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_anthropic_sends_image_and_document_blocks_as_the_api_accepted_them(server, name, driver):
    """Images and PDFs, by URL or as base64, go out as the recorded blocks; the recorded answer ends the run."""
    recording = _recording(name)
    server.script(recording.reply(0))
    recorded = recording.request(0)
    task = [_anthropic_item(block) for block in recorded["messages"][-1]["content"]]
    model = AnthropicMessages(base_url=server.url, **recorded_settings())
    go = run if driver == "sync" else lambda *a, **k: asyncio.run(arun(*a, **k))
    result = go(task, model, {}, system_prompt="")
    assert result.stop is Stop.ANSWERED
    assert result.answer == recording.response(0)["content"][0]["text"]
    assert server.requests[0].body["messages"] == recorded["messages"]


def test_anthropic_streams_with_a_document_in_the_task(server):
    """Streamed, the request carries the document block and the streamed answer is the recorded text."""
    recording = _recording("anthropic__test_document_url_input")
    body = recording.response(0)
    server.script(Reply(200, explode("anthropic", body, [5, 40]), (("Content-Type", "text/event-stream"),)))
    task = [_anthropic_item(block) for block in recording.request(0)["messages"][-1]["content"]]
    model = AnthropicMessages(base_url=server.url, stream=True, **recorded_settings())
    result = run(task, model, {}, system_prompt="")
    assert result.answer == body["content"][0]["text"]
    assert server.requests[0].body["messages"] == recording.request(0)["messages"]


def test_anthropic_shows_an_image_in_a_tool_result_and_refuses_one_in_the_system_prompt(server):
    """A tool message's image goes inside its tool_result; an image in a system message is refused, typed."""
    image = Image(url="https://example.com/chart.png")
    model = AnthropicMessages(base_url=server.url, **recorded_settings())
    history = [
        {"role": "user", "content": "Fetch the chart."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "chart", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": ["The chart:", image]},
    ]  # fmt: skip
    body = model.request_body(run_history(history), [])
    result = body["messages"][2]["content"][0]
    assert result["type"] == "tool_result"
    assert result["content"][1] == {"type": "image", "source": {"type": "url", "url": "https://example.com/chart.png"}}
    with pytest.raises(ProviderFailure, match="in a system message"):
        model.request_body(run_history([{"role": "system", "content": ["Logo:", image]}]), [])


NATIVE_BY_NAME = {r.name: r for r in load_recordings(FIXTURES, ("responses", "gemini"))}


def _native_run(server: Any, recording: Recording, task: list[Any], mode: str) -> Any:
    """``task`` run over the recorded reply: whole (``run`` or ``arun``) or as the stream the provider sends."""
    if mode == "stream":
        stream = native_explode(recording.adapter, recording.response(0), [4, 11])
        server.script(Reply(200, stream, (("Content-Type", "text/event-stream"),)))
    else:
        server.script(recording.reply(0))
    model = make_native(recording, server.url, stream=mode == "stream")
    go = (lambda *a, **k: asyncio.run(arun(*a, **k))) if mode == "async" else run
    return go(task, model, {}, system_prompt="")


def _responses_item(part: dict[str, Any]) -> Any:
    """A recorded Responses input part as the task item that stands for it."""
    if part["type"] == "input_text":
        return part["text"]
    if part["type"] == "input_image":
        return Image(url=part["image_url"])
    media_type, data = _decoded(part["file_data"])
    return File(data=data, media_type=media_type, name=part["filename"])


def _responses_answer(body: dict[str, Any]) -> str:
    return "".join(c["text"] for item in body["output"] if item["type"] == "message" for c in item["content"])


RESPONSES = ["openai__test_openai_responses_image_url_input",
             "openai__test_openai_responses_document_as_binary_content_input"]  # fmt: skip


@pytest.mark.parametrize("name", RESPONSES)
@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
def test_responses_sends_input_image_and_input_file_as_the_api_accepted_them(server, name, mode):
    """The user message's content is the recorded input_text / input_image / input_file list, in every driver."""
    recording = NATIVE_BY_NAME[name]
    recorded = recording.request(0)["input"][0]["content"]
    result = _native_run(server, recording, [_responses_item(part) for part in recorded], mode)
    assert result.answer == _responses_answer(recording.response(0))
    sent = server.requests[0].body["input"]
    assert sent == [{"type": "message", "role": "user", "content": recorded}]


def _snake(key: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


def _gemini_item(part: dict[str, Any]) -> Any:
    """A recorded Gemini part as the task item that stands for it (the SDK writes url-safe base64)."""
    if "text" in part:
        return part["text"]
    if "fileData" in part:
        data = {_snake(k): v for k, v in part["fileData"].items()}
        return (Image if data["mime_type"].startswith("image/") else File)(url=data["file_uri"])
    inline = {_snake(k): v for k, v in part["inlineData"].items()}
    raw = base64.urlsafe_b64decode(inline["data"])
    return (Image if inline["mime_type"].startswith("image/") else File)(data=raw, media_type=inline["mime_type"])


def _gemini_same(sent: dict[str, Any], recorded: dict[str, Any]) -> bool:
    """Two Gemini parts mean the same: keys in either JSON spelling, base64 in either alphabet."""
    if "text" in recorded:
        return sent == recorded
    (kind, value), (their_kind, theirs) = next(iter(sent.items())), next(iter(recorded.items()))
    mine, theirs = {_snake(k): v for k, v in value.items()}, {_snake(k): v for k, v in theirs.items()}
    if "data" in mine:
        mine["data"], theirs["data"] = base64.b64decode(mine["data"]), base64.urlsafe_b64decode(theirs["data"])
    return kind == their_kind and mine == theirs


GEMINI = ["google__test_google_url_input_ImageUrl", "google__test_google_url_input_DocumentUrl",
          "google__test_google_model_document_url_input"]  # fmt: skip


@pytest.mark.parametrize("name", GEMINI)
@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
def test_gemini_sends_inline_data_and_file_data_as_the_api_accepted_them(server, name, mode):
    """Bytes go as inlineData, URLs as fileData with their media type; the recorded answer ends the run."""
    recording = NATIVE_BY_NAME[name]
    recorded = recording.request(0)["contents"][0]["parts"]
    result = _native_run(server, recording, [_gemini_item(part) for part in recorded], mode)
    body = recording.response(0)
    assert result.answer == "".join(p["text"] for p in body["candidates"][0]["content"]["parts"])
    sent = server.requests[0].body["contents"][0]["parts"]
    assert len(sent) == len(recorded) and all(map(_gemini_same, sent, recorded))


def test_gemini_refuses_an_image_url_that_names_no_media_type(server):
    """fileData needs a mimeType: an address without a known suffix is refused, typed, and nothing is sent."""
    model = make_native(NATIVE_BY_NAME[GEMINI[0]], server.url)
    result = run(["What is this?", Image(url="https://example.com/render?id=7")], model, {})
    assert result.stop is Stop.PROVIDER_ERROR and result.state.fault is not None
    assert result.state.fault.kind == "invalid_request" and "names no media type" in result.state.fault.message
    assert server.requests == []


def test_ollama_sends_images_as_base64_beside_the_text(server):
    """As in Ollama's API reference: the text in content, each image's base64 in images; files are refused."""
    recording = load_recordings(FIXTURES, ("ollama",))
    with_images = next(r for r in recording if r.name == "ollama__docs_with_images")
    server.script(with_images.reply(0))
    recorded = with_images.request(0)["messages"][0]
    image = png_image()
    model = OllamaChat(base_url=server.url, **recorded_settings())
    result = run([recorded["content"], image], model, {}, system_prompt="")
    assert result.answer == with_images.response(0)["message"]["content"]
    sent = server.requests[0].body["messages"][0]
    assert sent == {"role": "user", "content": recorded["content"], "images": [image.part["data"]]}
    refused = run(["Read this.", File(data=b"%PDF-1.4\n")], model, {})
    assert refused.state.fault is not None and refused.state.fault.kind == "invalid_request"
    assert "reads no file" in refused.state.fault.message and len(server.requests) == 1


def png_image() -> Image:
    """A small real PNG (the recorded request's own image was shortened in the API reference)."""
    return Image(data=png(8, 8), media_type="image/png")
