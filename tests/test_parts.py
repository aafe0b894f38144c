"""Images and files in the conversation: the typed parts, their saved form, placeholders and token estimates."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given

from agent_fsm import (
    MAX_PART_BYTES,
    Agent,
    ContentPartError,
    FallbackModel,
    File,
    Image,
    Limits,
    Observation,
    RunState,
    ScriptedModel,
    Stop,
    ToolSpec,
    allow_all,
    answer_message,
    estimate_tokens,
    image_tokens,
    media_estimator,
    placeholder,
    run,
    tool_call_message,
)
from agent_fsm.engine import format_transcript
from agent_fsm.engine._context import _line as summary_line
from agent_fsm.engine._launch import start_state
from agent_fsm.engine._messages import image_size, media_tokens
from agent_fsm.engine._state import SAVED
from agent_fsm.providers import AnthropicMessages, GeminiGenerate, OllamaChat, OpenAIChat, OpenAIResponses
from agent_fsm.testing import tasks, tool_results
from agent_fsm.web import render_view, timeline_of
from tests.media import pdf, png

PNG = png(1024, 1024)


def _state_with_parts() -> RunState:
    task = ["What is in these?", Image(data=PNG, media_type="image/png"), File(data=pdf(2), name="a.pdf")]
    return run(task, ScriptedModel([answer_message("A grey square and two empty pages.")]), {}).state


def test_a_task_with_an_image_and_a_file_is_kept_as_parts_in_the_transcript():
    """The task's text, image and file become parts of the user message, the bytes as base64."""
    state = _state_with_parts()
    parts = state.messages[state.opening - 1]["content"]
    assert parts[0] == {"type": "text", "text": "What is in these?"}
    assert parts[1] == {"type": "image", "media_type": "image/png", "data": base64.b64encode(PNG).decode()}
    assert parts[2]["type"] == "file" and parts[2]["name"] == "a.pdf"
    assert base64.b64decode(parts[2]["data"]) == pdf(2)


def test_a_state_with_parts_saves_and_loads_losslessly():
    """Saved and loaded, a state with an image and a file is equal and writes the same text again."""
    state = _state_with_parts()
    text = state.to_json()
    again = RunState.from_json(text)
    assert again == state and again.to_json() == text
    assert SAVED.quick(json.loads(text)) == state  # the fast reader takes parts as they are written


@pytest.mark.parametrize(
    ("part", "why"),
    [
        ({"type": "image", "url": "file:///etc/passwd"}, "url"),
        ({"type": "image", "media_type": "image/tiff", "data": "AAAA"}, "media_type"),
        ({"type": "image", "media_type": "image/png", "data": "not base64!"}, "base64"),
        ({"type": "image", "media_type": "image/png", "data": "AAAA", "name": "x"}, "keys"),
        ({"type": "file", "url": "https://a/b.pdf", "extra": 1}, "keys"),
        ({"type": "image_url", "image_url": {"url": "https://a/b.png"}}, "type must be"),
        ({"type": "text", "text": 3}, "text part"),
        ({"type": "image", "media_type": "image/png", "data": "A" * (MAX_PART_BYTES // 3 * 4 + 8)}, "cap"),
    ],
)
def test_a_saved_part_of_any_other_shape_is_refused_by_both_readers(part, why):
    """A part edited into a saved state is refused, typed, naming the message's content and the problem."""
    data = json.loads(_state_with_parts().to_json())
    data["messages"][1]["content"][1] = part
    assert SAVED.quick(json.loads(json.dumps(data))) is None  # the fast reader declines ...
    with pytest.raises(ValueError, match=r"messages\.1\.content") as caught:  # ... and the strict one names it
        RunState.from_json(json.dumps(data))
    assert why in str(caught.value)


def test_bytes_above_the_cap_are_refused_where_they_enter():
    """An image over MAX_PART_BYTES is refused when it is made, before any run starts."""
    with pytest.raises(ContentPartError, match="above the cap"):
        Image(data=b"\0" * (MAX_PART_BYTES + 1), media_type="image/png")
    Image(data=b"\0" * 16, media_type="image/png")  # small is fine


@pytest.mark.parametrize(
    "make",
    [
        lambda: Image(),
        lambda: Image(url="https://a/b.png", data=PNG, media_type="image/png"),
        lambda: Image(data=PNG, media_type="image/bmp"),
        lambda: File(data=b"%PDF", media_type="text/html"),
        lambda: Image(data="iVBOR", media_type="image/png"),
    ],
)
def test_an_image_or_file_that_cannot_be_a_part_is_a_typed_error(make):
    """Both or neither of url and data, a media type outside the list, or text for bytes: ContentPartError."""
    with pytest.raises(ContentPartError):
        make()


def test_history_parts_are_checked_at_the_boundary():
    """A history message carrying an Image is kept as a part; one carrying a provider's own form is refused."""
    image = Image(url="https://example.com/a.png")
    state = start_state("And this?", history=[{"role": "user", "content": ["Look:", image]}])
    assert state.messages[1]["content"][1] == {"type": "image", "url": "https://example.com/a.png"}
    with pytest.raises(ContentPartError, match="type must be"):
        start_state("x", history=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}])


def test_a_state_without_parts_saves_as_before():
    """A text task saves its content as a string, as every state saved before parts existed."""
    state = run("Hello.", ScriptedModel([answer_message("Hi.")]), {}).state
    assert '"content": "Hello."' in state.to_json() or '"content":"Hello."' in state.to_json()


def test_the_transcript_shows_a_placeholder_never_the_bytes():
    """format_transcript names each image and file by type and size; no base64 reaches the screen."""
    state = _state_with_parts()
    text = format_transcript(state.messages)
    assert f"[image image/png, {len(PNG)} bytes]" in text
    assert f"[file application/pdf, {len(pdf(2))} bytes]" in text
    assert base64.b64encode(PNG).decode()[:40] not in text


def test_image_sizes_are_read_from_their_headers():
    """PNG width and height come from the IHDR chunk; bytes that are no image give None."""
    assert image_size(png(300, 200)) == (300, 200)
    assert image_size(b"GIF89a" + (640).to_bytes(2, "little") + (480).to_bytes(2, "little")) == (640, 480)
    assert image_size(b"hello") is None


@pytest.mark.parametrize(
    ("size", "rule", "tokens"),
    [
        ((1024, 1024), "openai", 765),  # OpenAI's worked example: 768x768, four tiles
        ((2048, 4096), "openai", 1105),  # fit 1024x2048, shortest 768x1536: six tiles
        ((512, 512), "openai", 255),
        ((1000, 1000), "anthropic", 1334),  # Anthropic: width x height / 750
        ((384, 384), "gemini", 258),
        ((1000, 1000), "gemini", 1032),  # four 768-pixel tiles
    ],
)
def test_image_tokens_follow_each_providers_published_rule(size, rule, tokens):
    """The figures the providers' documentation gives for these sizes."""
    assert image_tokens(size, rule) == tokens


def test_the_estimate_prices_an_image_by_its_tiles_not_its_base64():
    """A 1024x1024 image costs 765 tokens plus the text, however long its base64 is; a PDF by its pages."""
    message = {
        "role": "user",
        "content": [{"type": "text", "text": "hi"}, Image(data=PNG, media_type="image/png").part],
    }
    text_only = estimate_tokens({"role": "user", "content": [{"type": "text", "text": "hi"}]})
    assert estimate_tokens(message) == text_only + 765
    assert media_tokens(File(data=pdf(3)).part) == 9000


def test_an_image_task_counts_against_the_prompt_budget():
    """The opening's estimate includes the image's tiles, so prompt budgets bind."""
    plain = start_state("What is in this?")
    pictured = start_state(["What is in this?", Image(data=PNG, media_type="image/png")])
    assert pictured.message_tokens >= plain.message_tokens + 765


def test_each_provider_prices_the_same_image_by_its_own_rule():
    """One 1024x1024 PNG: 765 tokens for OpenAI, 1399 for Anthropic, 1032 for Gemini; text counts alike."""
    message = {"role": "user", "content": [Image(data=PNG, media_type="image/png").part]}
    text = estimate_tokens({"role": "user", "content": []})
    assert media_estimator("openai") is estimate_tokens
    assert media_estimator("anthropic")(message) == text + 1399
    assert media_estimator("gemini")(message) == text + 1032
    plain = {"role": "user", "content": "the same text"}
    assert {media_estimator(r)(plain) for r in ("openai", "anthropic", "gemini")} == {estimate_tokens(plain)}
    assert media_tokens(File(data=pdf(3)).part, "gemini") == 3 * 258


def test_the_adapters_estimators_follow_their_providers():
    """Each adapter's estimator is its provider's rule, so Agent(estimator=model.estimator) prices images truly."""
    settings = {"model": "m", "base_url": "http://127.0.0.1:9"}
    assert OpenAIChat(**settings).estimator is estimate_tokens
    assert OpenAIResponses(**settings).estimator is estimate_tokens
    assert OllamaChat(**settings).estimator is estimate_tokens
    assert AnthropicMessages(**settings).estimator is media_estimator("anthropic")
    assert GeminiGenerate(**settings).estimator is media_estimator("gemini")


def test_a_prompt_budget_binds_on_an_image():
    """A budget the text alone fits in stops a run whose task holds a large image, before the model is asked."""
    image = Image(data=png(2048, 2048), media_type="image/png")  # 765 tokens by OpenAI's rule
    limits = Limits(max_prompt_tokens=600)
    model = ScriptedModel([answer_message("Seen.")])
    assert run("Describe it.", model, {}, limits=limits).stop is Stop.ANSWERED
    result = run(["Describe it.", image], ScriptedModel([answer_message("Seen.")]), {}, limits=limits)
    assert result.stop is not Stop.ANSWERED and result.state.turns == 0


def test_an_input_screen_reads_the_task_with_placeholders_not_bytes():
    """The screen sees the task's text and each image or file as its placeholder, so it knows they are there."""
    seen: list[str] = []

    def screen(text: str, state: RunState) -> None:
        seen.append(text)

    agent = Agent(ScriptedModel([answer_message("Seen.")]), {}, screen_input=screen)
    image = Image(data=PNG, media_type="image/png")
    agent.run(["Is this safe?", image, File(url="https://example.com/a.pdf")])
    assert seen == [f"Is this safe? [image image/png, {len(PNG)} bytes] [file at https://example.com/a.pdf]"]


def test_a_summary_is_handed_placeholders_not_bytes():
    """The line a summarizer reads for a message with an image names its type and size only."""
    message = {
        "role": "user",
        "content": [{"type": "text", "text": "See:"}, Image(data=PNG, media_type="image/png").part],
    }
    line = summary_line(message)
    assert line == f"user: See: [image image/png, {len(PNG)} bytes]"


def test_the_run_viewer_shows_a_placeholder_never_the_bytes(tmp_path):
    """The saved page names the task's image by type and size; no base64 of it is in the page."""
    state = _state_with_parts()
    page = render_view(state)
    assert f"[image image/png, {len(PNG)} bytes]" in page
    assert base64.b64encode(PNG).decode()[:40] not in page
    assert timeline_of(state).task is not None and "[file application/pdf" in timeline_of(state).task


@given(tasks())
def test_any_task_of_text_images_and_files_saves_losslessly_and_shows_no_bytes(task):
    """For every task the kit draws: the run saves and loads equal, both readers agree, the screen text has no bytes."""
    state = run(task, ScriptedModel([answer_message("Done.")]), {}).state
    text = state.to_json()
    assert RunState.from_json(text) == state and SAVED.quick(json.loads(text)) == state
    shown = format_transcript(state.messages)
    for item in task if isinstance(task, list) else ():
        if not isinstance(item, str) and "data" in item.part:
            assert item.part["data"] not in shown or len(item.part["data"]) < 8
            assert f"{len(base64.b64decode(item.part['data']))} bytes" in shown


def _snapping(returned: Any) -> tuple[dict[str, ToolSpec], ScriptedModel]:
    tools = {"snap": ToolSpec("Takes a picture.", {"type": "object", "properties": {}}, lambda: returned)}
    return tools, ScriptedModel([tool_call_message("c1", "snap", {}), answer_message("Taken.")])


def test_an_image_a_tool_returns_reaches_the_model_whole_and_everything_else_reads_its_placeholder():
    """
    The tool message carries the image itself; the observation (what gates, screens and events read) holds
    its placeholder, the image rides in ``media``, and the saved state keeps it byte for byte.
    """
    image = Image(data=PNG, media_type="image/png")
    tools, script = _snapping({"caption": "the desk", "shot": image})
    seen: list[Any] = []

    def screen(observation: Any, state: Any) -> None:
        seen.append(observation.content)

    state = Agent(script, tools, gate=allow_all, screen_result=screen).run("Snap.").state
    shown = f"[image image/png, {len(PNG)} bytes]"
    observation = state.observations[0]
    assert observation.content == {"caption": "the desk", "shot": shown} and not observation.text_form
    assert observation.media == (image.part,) and seen == [observation.content]
    assert repr(observation).count(shown) == 2 and image.part["data"] not in repr(observation)
    message = state.messages[-2]
    assert message["role"] == "tool" and message["content"][1] == image.part
    assert json.loads(message["content"][0]["text"])["content"]["shot"] == shown
    assert RunState.from_json(state.to_json()) == state  # lossless: the bytes come back as they went
    assert image.part["data"] not in summary_line(message) and shown in summary_line(message)
    assert image.part["data"] not in render_view(state)


def test_a_results_media_together_stay_within_the_cap_and_the_rest_is_said_not_sent():
    """
    A handler's images and files are capped together, as an MCP server's are: three of 8 MiB each, the first
    two are sent; the third stays its placeholder, saying it was not sent, so the transcript cannot grow past
    one part's cap per result.
    """
    big = 8 * 1024 * 1024
    shots = [Image(data=bytes([k]) * big, media_type="image/png") for k in range(3)]
    tools, script = _snapping(shots)
    observation = Agent(script, tools, gate=allow_all).run("Snap.").state.observations[0]
    assert observation.media == (shots[0].part, shots[1].part)
    assert observation.content[:2] == [str(shots[0]), str(shots[1])]
    assert observation.content[2].startswith(str(shots[2])) and "not sent" in observation.content[2]
    assert sum(len(base64.b64decode(p["data"])) for p in observation.media) <= MAX_PART_BYTES


def test_a_tools_image_is_priced_by_the_providers_rule_in_the_prompt_budget():
    """The tool message holding a 2048x2048 PNG costs its text plus the image by the model's rule, never its base64."""
    image = Image(data=png(2048, 2048), media_type="image/png")
    tools, script = _snapping(image)
    state = Agent(script, tools, gate=allow_all, estimator=media_estimator("anthropic")).run("Snap.").state
    message = state.messages[-2]
    text = {**message, "content": [message["content"][0]]}
    expected = -(-len(json.dumps(text)) // 4) + image_tokens((2048, 2048), "anthropic")
    assert media_estimator("anthropic")(message) == expected
    assert expected < len(image.part["data"]) // 4  # the base64 alone would be priced far higher
    assert state.message_tokens >= expected


def test_a_redacting_screen_withholds_the_results_images():
    """A redaction shows the model its content only: the image the tool returned does not reach the model."""
    from agent_fsm import Redact

    tools, script = _snapping(["secret", Image(data=PNG, media_type="image/png")])
    state = Agent(script, tools, gate=allow_all, screen_result=lambda o, s: Redact("[withheld]")).run("Snap.").state
    assert state.messages[-2]["content"] == json.dumps({"ok": True, "kind": "result", "content": "[withheld]"})
    assert state.observations[0].media  # the raw observation keeps what the tool returned


def test_an_agent_measures_prompts_by_its_models_rule_unasked():
    """Without estimator=, an Anthropic model's image rule binds the prompt budget; a chain takes its dearest rule."""
    image = Image(data=png(2048, 2048), media_type="image/png")  # with the text: 783 by OpenAI, 3297 by Anthropic
    limits = Limits(max_prompt_tokens=2000)
    local = {"base_url": "http://127.0.0.1:9", "max_retries": 0}  # nothing listens: a call made fails at once
    anthropic = AnthropicMessages(model="claude", api_key="sk-ant-0123456789", **local)
    openai = OpenAIChat(model="gpt", api_key="sk-0123456789abcdef", **local)
    bound = Agent(anthropic, {}, limits=limits).run(["Describe it.", image])
    assert bound.stop is Stop.TOKEN_LIMIT and bound.state.turns == 0  # refused before the model was asked
    asked = Agent(anthropic, {}, limits=limits, estimator=estimate_tokens).run(["Describe it.", image])
    assert asked.stop is Stop.PROVIDER_ERROR  # an explicit estimator still wins: the call was tried
    assert Agent(openai, {}, limits=limits).run(["Describe it.", image]).stop is Stop.PROVIDER_ERROR
    chained = Agent(FallbackModel(openai, anthropic), {}, limits=limits).run(["Describe it.", image])
    assert chained.stop is Stop.TOKEN_LIMIT and chained.state.turns == 0
    swapped = Agent(openai, {}, limits=limits).replace(model=anthropic).run(["Describe it.", image])
    assert swapped.stop is Stop.TOKEN_LIMIT  # the agent follows its model when the model is replaced


def test_a_wrapped_model_passes_its_adapters_estimator_on(tmp_path):
    """
    A recording, a meter's or the kit's watched model prices images by the wrapped adapter's rule: an Anthropic
    adapter behind any of them binds the prompt budget as it does alone.
    """
    from agent_fsm.patterns import Meter
    from agent_fsm.testing import RecordingModel
    from agent_fsm.testing._watchdog import _Watched

    image = Image(data=png(2048, 2048), media_type="image/png")  # with the text: 783 by OpenAI, 3297 by Anthropic
    local = {"base_url": "http://127.0.0.1:9", "max_retries": 0}  # nothing listens: a call made fails at once
    anthropic = AnthropicMessages(model="claude", api_key="sk-ant-0123456789", **local)
    limits = Limits(max_prompt_tokens=2000)
    recording = Agent(RecordingModel(anthropic, tmp_path / "c.json"), {}, limits=limits)
    metered = Meter().metered(Agent(anthropic, {}, limits=limits))
    watched = Agent(_Watched(anthropic, None), {}, limits=limits)
    for agent in (recording, metered, watched):
        assert agent.token_estimator is media_estimator("anthropic"), agent.model
        bound = agent.run(["Describe it.", image])
        assert bound.stop is Stop.TOKEN_LIMIT and bound.state.turns == 0, agent.model  # refused before asking


@given(tool_results())
def test_whatever_a_tool_returns_its_media_reach_the_model_and_only_their_placeholders_elsewhere(returned):
    """
    For any result with images and files in it: the tool message carries exactly those parts, in order; the
    observation and the events (but the ending, which holds the state) show no byte of them; the saved state
    gives them back whole.
    """
    items = returned.values() if isinstance(returned, dict) else returned if isinstance(returned, list) else [returned]
    found = [x for x in items if isinstance(x, Image | File)]
    events: list[Any] = []
    tools, script = _snapping(returned)
    roomy = Limits(max_prompt_tokens=10**6)  # a PDF by URL is priced as 3,000 tokens, the top of the published range
    state = Agent(script, tools, gate=allow_all, limits=roomy).run("Snap.", on_event=events.append).state
    observation = state.observations[0]
    assert list(observation.media) == [item.part for item in found]
    message = state.messages[-2]
    assert (message["content"][1:] if found else []) == [item.part for item in found]
    shown = json.dumps(observation.content) + repr([e for e in events if not hasattr(e, "result")])  # Ended: the state
    for item in found:
        data = item.part.get("data")
        assert data is None or len(data) < 12 or data not in shown
        assert placeholder(item.part) in shown
    assert RunState.from_json(state.to_json()) == state


def test_a_result_that_holds_itself_sends_its_image_once_and_keeps_the_rest_as_text():
    """A cyclic result: its image is taken out once; the cycle stays its text form, with no byte of the image."""
    image = Image(data=PNG, media_type="image/png")
    cyclic: list[Any] = [image]
    cyclic.append(cyclic)
    tools, script = _snapping(cyclic)
    observation = Agent(script, tools, gate=allow_all).run("Snap.").state.observations[0]
    assert observation.media == (image.part,) and observation.text_form
    assert image.part["data"] not in observation.content and placeholder(image.part) in observation.content


def test_a_scripted_models_reactions_read_the_text_of_a_result_that_holds_an_image():
    """ScriptedModel's reactions match the text part of a tool message whose content is a list of parts."""
    tools, _ = _snapping(["the desk", Image(data=PNG, media_type="image/png")])
    script = ScriptedModel([tool_call_message("c1", "snap", {})], reactions={"the desk": answer_message("Seen.")})
    result = Agent(script, tools, gate=allow_all).run("Snap.")
    assert result.stop is Stop.ANSWERED and result.answer == "Seen."


def test_a_policy_reads_a_result_that_holds_an_image_as_its_text():
    """observations_of (what a policy reads) gives a tool's image result as data with the placeholder, not a crash."""
    from agent_fsm.engine import observations_of, tool_message

    image = Image(data=PNG, media_type="image/png")
    result = tool_message(Observation("c1", True, "result", ["the desk", str(image)], media=(image.part,)))
    messages = [{"role": "user", "content": "Snap."}, tool_call_message("c1", "snap", {}), result]
    (seen,) = observations_of(messages)
    assert seen["ok"] and seen["action"] == "snap" and seen["result"] == ["the desk", placeholder(image.part)]


def test_the_kits_report_of_a_run_shows_a_tools_image_as_its_placeholder():
    """describe_run (a failing example's report) names a tool's image by type and size, never its bytes."""
    from agent_fsm.testing import describe_run

    image = Image(data=PNG, media_type="image/png")
    tools, script = _snapping(image)
    report = describe_run(Agent(script, tools, gate=allow_all).run("Snap."))
    assert image.part["data"] not in report and report.count(placeholder(image.part)) == 2  # the text, the part
