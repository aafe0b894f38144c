"""
A tool's image or PDF reaching the model, checked against requests the providers accepted.

Each recording (``fixtures/tool_media``, origins in ``fixtures/SOURCES.md``) holds a
conversation where a tool returned an image or a PDF and the model described it: the
tool here returns the recorded bytes as :class:`agent_fsm.Image` / :class:`agent_fsm.File`,
the recorded replies are served from 127.0.0.1 (whole to ``run`` and ``arun``, and as
the stream the provider sends), and the request that carried the result must hold the
recorded media part where the provider reads it.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from agent_fsm import File, Image, Stop, ToolSpec, arun, run
from agent_fsm.providers import AnthropicMessages, GeminiGenerate, OpenAIChat, OpenAIResponses

from .loopback import Reply
from .native import explode as native_explode
from .recordings import FIXTURES, Recording, load_recordings
from .streaming import explode
from .test_recorded import recorded_settings

WIRES = ("anthropic", "openai", "responses", "gemini")
RECORDINGS = {r.name: r for r in load_recordings(FIXTURES / "tool_media", WIRES)}
NAMES = sorted(RECORDINGS)


def _snake(key: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


def _decoded(url: str) -> tuple[str, bytes]:
    head, data = url.split(",", 1)
    return head.removeprefix("data:").removesuffix(";base64"), base64.b64decode(data)


def _last_request(recording: Recording) -> dict[str, Any]:
    request = recording.request(len(recording.interactions) - 1)
    assert request is not None
    return request


def _recorded_part(recording: Recording) -> Any:
    """The media part of the request that carried the tool's result, as the provider accepted it."""
    body = _last_request(recording)
    if recording.adapter == "anthropic":
        return body["messages"][-1]["content"][0]["content"][0]
    if recording.adapter == "openai":
        return body["messages"][-1]["content"][1]
    if recording.adapter == "responses":
        return body["input"][-1]["output"][0]
    last = body["contents"][-1]["parts"]
    if "functionResponse" in last[0]:  # Gemini 3: inside the function response
        return last[0]["functionResponse"]["parts"][0]
    return last[1]


def _media(recording: Recording) -> tuple[bytes, str]:
    """The bytes and media type the recorded tool returned."""
    part = _recorded_part(recording)
    if recording.adapter == "anthropic":
        return base64.b64decode(part["source"]["data"]), part["source"]["media_type"]
    if recording.adapter == "openai":
        url = part["image_url"]["url"] if part["type"] == "image_url" else part["file"]["file_data"]
        media_type, data = _decoded(url)
        return data, media_type
    if recording.adapter == "responses":
        media_type, data = _decoded(part.get("image_url") or part["file_data"])
        return data, media_type
    inline = {_snake(k): v for k, v in next(iter(part.values())).items()}
    return base64.urlsafe_b64decode(inline["data"]), inline["mime_type"]


def _tools(recording: Recording) -> dict[str, ToolSpec]:
    """``get_file`` as recorded (no parameters), returning the recorded bytes as an Image or a File."""
    data, media_type = _media(recording)

    def get_file() -> Image | File:
        if media_type.startswith("image/"):
            return Image(data=data, media_type=media_type)
        return File(data=data, media_type=media_type, name="filename.pdf")  # the recorded file name

    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    return {"get_file": ToolSpec("Fetch the file.", schema, get_file)}


def _model(recording: Recording, url: str, stream: bool) -> Any:
    """The adapter that speaks the recording's wire format; Gemini's model name as recorded (it decides the form)."""
    if recording.adapter == "anthropic":
        return AnthropicMessages(base_url=url, **recorded_settings(stream=stream))
    if recording.adapter == "openai":
        return OpenAIChat(base_url=url + "/v1", **recorded_settings(stream=stream))
    if recording.adapter == "responses":
        return OpenAIResponses(base_url=url + "/v1", **recorded_settings(stream=stream))
    name = _last_request_uri(recording).split("/models/")[1].split(":")[0]
    return GeminiGenerate(base_url=url + "/v1beta", **recorded_settings(model=name, stream=stream))


def _last_request_uri(recording: Recording) -> str:
    return str(recording.interactions[-1]["request"]["uri"])


def _task(recording: Recording) -> str:
    body = recording.request(0)
    assert body is not None
    if recording.adapter == "anthropic":
        return str(body["messages"][0]["content"][0]["text"])
    if recording.adapter == "openai":
        return str(body["messages"][0]["content"])
    if recording.adapter == "responses":
        return str(body["input"][0]["content"])
    return str(body["contents"][0]["parts"][0]["text"])


def _answer(recording: Recording) -> str:
    body = recording.response(len(recording.interactions) - 1)
    if recording.adapter == "anthropic":
        return "".join(b["text"] for b in body["content"] if b["type"] == "text")
    if recording.adapter == "openai":
        return str(body["choices"][0]["message"]["content"])
    if recording.adapter == "responses":
        return "".join(c["text"] for i in body["output"] if i["type"] == "message" for c in i["content"])
    return "".join(p["text"] for p in body["candidates"][0]["content"]["parts"] if "text" in p)


def _script(server: Any, recording: Recording, stream: bool) -> None:
    for index in range(len(recording.interactions)):
        if not stream:
            server.script(recording.reply(index))
            continue
        body = recording.response(index)
        native = recording.adapter in ("responses", "gemini")
        raw = (native_explode if native else explode)(recording.adapter, body, [3, 17])
        server.script(Reply(200, raw, (("Content-Type", "text/event-stream"),)))


def _same_gemini_part(sent: dict[str, Any], recorded: dict[str, Any]) -> bool:
    """One inline part in either JSON spelling (inlineData / inline_data), base64 in either alphabet."""
    (kind, value), (their_kind, theirs) = next(iter(sent.items())), next(iter(recorded.items()))
    mine, theirs = {_snake(k): v for k, v in value.items()}, {_snake(k): v for k, v in theirs.items()}
    mine["data"], theirs["data"] = base64.b64decode(mine["data"]), base64.urlsafe_b64decode(theirs["data"])
    return _snake(kind) == _snake(their_kind) and mine == theirs


def _check_sent(recording: Recording, sent: dict[str, Any]) -> None:
    """The request that carried the result holds the recorded media part where the provider reads it."""
    recorded = _recorded_part(recording)
    if recording.adapter == "anthropic":
        result = sent["messages"][-1]["content"][0]
        assert result["type"] == "tool_result" and "is_error" not in result
        assert result["content"][-1] == recorded  # after the result's text, the image or document block
    elif recording.adapter == "openai":
        roles = [m["role"] for m in sent["messages"]]
        assert roles == [m["role"] for m in _last_request(recording)["messages"]]  # user, assistant, tool, user
        assert isinstance(sent["messages"][-2]["content"], str)  # the tool message: text only
        assert sent["messages"][-1]["content"][-1] == recorded
    elif recording.adapter == "responses":
        output = sent["input"][-1]
        assert output["type"] == "function_call_output" and output["output"][-1] == recorded
    elif "functionResponse" in _last_request(recording)["contents"][-1]["parts"][0]:
        response = sent["contents"][-1]["parts"][-1]["functionResponse"]
        assert response["name"] == "get_file" and _same_gemini_part(response["parts"][0], recorded)
    else:  # before Gemini 3: the media follow the function response, in the same user turn
        parts = sent["contents"][-1]["parts"]
        assert "functionResponse" in parts[0] and _same_gemini_part(parts[-1], recorded)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
def test_a_tools_image_or_pdf_reaches_the_model_as_the_provider_accepted_it(server, name, mode):
    """Over the recorded replies the run ends with the recorded description; the media went as recorded."""
    recording = RECORDINGS[name]
    _script(server, recording, mode == "stream")
    model = _model(recording, server.url, mode == "stream")
    go = (lambda *a, **k: asyncio.run(arun(*a, **k))) if mode == "async" else run
    result = go(_task(recording), model, _tools(recording), system_prompt="")
    assert result.stop is Stop.ANSWERED, result.state.fault
    assert result.answer == _answer(recording)
    assert len(server.requests) == len(recording.interactions)
    _check_sent(recording, server.requests[-1].body)
    observation = result.state.observations[-1]
    assert observation.ok and len(observation.media) == 1
    assert "bytes]" in str(observation.content) and observation.media[0]["data"] not in str(observation.content)


def test_the_recordings_hold_the_providers_own_media():
    """Each recording carries real bytes: a JPEG or a PDF, decoded from the request that carried the result."""
    for recording in RECORDINGS.values():
        data, media_type = _media(recording)
        assert data.startswith(b"\xff\xd8" if media_type == "image/jpeg" else b"%PDF"), recording.name


def test_every_recording_names_its_origin():
    """Each fixture says which repository, path and commit it was copied from, and SOURCES.md lists it."""
    listed = (FIXTURES / "SOURCES.md").read_text()
    for recording in RECORDINGS.values():
        assert len(recording.origin["commit"]) == 40 and recording.origin["repo"] == "pydantic/pydantic-ai"
        assert f"`tool_media/{recording.adapter}/{recording.name}.json`" in listed, recording.id
        assert recording.origin["path"] in listed


def test_chat_sends_a_turns_results_first_then_their_images_in_one_user_message(server):
    """
    Two calls in one turn, each returning an image: Chat Completions gets both tool messages as text, then one
    user message naming each call and holding its image (a user message between them would break the turn).
    """
    from agent_fsm import ScriptedModel
    from agent_fsm.engine import tool_call_message
    from tests.media import png

    first, second = Image(data=png(4, 4), media_type="image/png"), Image(url="https://example.com/b.png")
    tools = {
        "front": ToolSpec("Front view.", {}, lambda: first),
        "back": ToolSpec("Back view.", {}, lambda: {"view": second}),
    }
    both = tool_call_message("c1", "front", {})
    both["tool_calls"] += tool_call_message("c2", "back", {})["tool_calls"]
    state = run("Look.", ScriptedModel([both], last_word="Done."), tools).state
    server.script(RECORDINGS["openai__direct_binary_image_openai_chat"].reply(1))
    OpenAIChat(base_url=server.url + "/v1", **recorded_settings()).chat(state.messages[:-1], [])
    sent = server.requests[0].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert all(isinstance(m["content"], str) for m in sent[3:5])
    assert sent[5]["content"] == [
        {"type": "text", "text": "The result of front (call c1) shows:"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{first.part['data']}"}},
        {"type": "text", "text": "The result of back (call c2) shows:"},
        {"type": "image_url", "image_url": {"url": "https://example.com/b.png"}},
    ]


def test_ollama_sends_a_tools_image_in_a_user_message_after_the_result():
    """Ollama's tool messages take text: the result's image goes as base64 in a user message after it."""
    from agent_fsm import Observation
    from agent_fsm.engine import tool_call_message, tool_message
    from agent_fsm.providers import OllamaChat
    from tests.media import png

    image = Image(data=png(4, 4), media_type="image/png")
    result = tool_message(Observation("c1", True, "result", str(image), media=(image.part,)))
    messages = [{"role": "user", "content": "Look."}, tool_call_message("c1", "snap", {}), result]
    body = OllamaChat(base_url="http://127.0.0.1:9", model="m").request_body(messages, [])
    sent = body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[2]["content"] == result["content"][0]["text"]
    assert sent[3]["images"] == [image.part["data"]] and "snap (call c1)" in sent[3]["content"]
