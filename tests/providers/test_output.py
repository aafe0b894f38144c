"""
Typed output over the wire: each adapter asks natively and reads what real servers sent back.

The replies are recorded structured-output traffic (``fixtures/SOURCES.md``): gpt-4o
answering under ``response_format`` ``json_schema``, an Ollama ``/v1`` server under the
same, Claude calling the forced ``final_result`` tool, and Ollama's ``/api/chat`` under
``format``. The requests the adapters send are compared with the recorded requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pydantic

from agent_fsm import Agent, Limits, ModelReply, Stop, ToolSpec
from agent_fsm.engine import output_spec
from agent_fsm.providers import AnthropicMessages

from .recordings import RECORDINGS
from .test_recorded import make_adapter

BY_NAME = {r.name: r for r in RECORDINGS}


@dataclasses.dataclass
class CityLocation:
    city: str
    country: str


class PydanticCity(pydantic.BaseModel):
    city: str
    country: str


def _shape(schema: dict[str, Any]) -> tuple[Any, ...]:
    """What a schema asks for, titles aside (pydantic titles every property; pydantic-ai strips them)."""
    return schema["type"], sorted(schema["required"]), {k: v["type"] for k, v in schema["properties"].items()}


def _country_tool() -> dict[str, ToolSpec]:
    return {"get_user_country": ToolSpec("", {"type": "object", "properties": {}}, lambda: "Mexico")}


def test_openai_asks_with_response_format_and_reads_gpt_4o_s_structured_answer(server):
    """gpt-4o's recorded run: a tool call, then the JSON answer; the request carries the recorded json_schema."""
    recording = BY_NAME["openai__test_openai_native_output"]
    server.script(*recording.replies())
    model = make_adapter(recording, server.url)
    result = Agent(model, _country_tool(), output=CityLocation).run("What is the largest city in the user country?")
    assert result.stop is Stop.ANSWERED
    assert result.output == CityLocation("Mexico City", "Mexico")
    sent = server.requests[0].body["response_format"]
    recorded = recording.request(0)["response_format"]
    assert sent["type"] == recorded["type"] == "json_schema"
    assert sent["json_schema"]["name"] == recorded["json_schema"]["name"] == "CityLocation"
    assert sent["json_schema"]["strict"] is recorded["json_schema"]["strict"] is True
    for key in ("properties", "required", "additionalProperties", "type"):
        assert sent["json_schema"]["schema"][key] == recorded["json_schema"]["schema"][key], key
    assert len(server.requests) == 2 and "response_format" in server.requests[1].body


def test_an_openai_compatible_ollama_reads_to_a_pydantic_instance(server):
    """Ollama's /v1 recorded answer under json_schema becomes the pydantic model (not strict: its schema is open)."""
    recording = BY_NAME["ollama-v1__test_ollama_local_native_output_uses_json_schema"]
    server.script(*recording.replies())
    result = Agent(make_adapter(recording, server.url), {}, output=PydanticCity).run("What is the capital of France?")
    assert result.output == PydanticCity(city="Paris", country="France")
    sent = server.requests[0].body["response_format"]["json_schema"]
    assert sent["strict"] is False
    assert _shape(sent["schema"]) == _shape(recording.request(0)["response_format"]["json_schema"]["schema"])


def test_anthropic_forces_the_final_tool_and_reads_claude_s_call_as_the_answer(server):
    """Claude's recorded run: get_user_country, then final_result; the call's input is the typed answer."""
    recording = BY_NAME["anthropic__test_anthropic_tool_output"]
    server.script(*recording.replies())
    model = make_adapter(recording, server.url)
    result = Agent(model, _country_tool(), output=PydanticCity).run("What is the largest city in the user country?")
    assert result.stop is Stop.ANSWERED
    assert result.output == PydanticCity(city="Mexico City", country="Mexico")
    for index, received in enumerate(server.requests):
        recorded = recording.request(index)
        assert received.body["tool_choice"] == recorded["tool_choice"] == {"type": "any"}
        assert [t["name"] for t in received.body["tools"]] == [t["name"] for t in recorded["tools"]]
        final = received.body["tools"][-1]
        assert final["description"] == recorded["tools"][-1]["description"]
        assert _shape(final["input_schema"]) == _shape(recorded["tools"][-1]["input_schema"])
    answer = result.state.messages[-1]
    assert "tool_calls" not in answer and json.loads(answer["content"]) == {"city": "Mexico City", "country": "Mexico"}


def test_ollama_asks_with_format_and_reads_the_structured_answer(server):
    """Ollama's documented /api/chat structured output: the schema goes in format, the answer validates."""
    recording = BY_NAME["ollama__docs_structured_outputs"]
    schema = recording.request(0)["format"]
    server.script(*recording.replies())
    result = Agent(make_adapter(recording, server.url), {}, output=schema).run("Ollama is 22 years old")
    assert result.output == {"age": 22, "available": False}
    assert server.requests[0].body["format"] == schema


def test_native_output_off_sends_no_schema_and_the_text_is_parsed(server):
    """native_output=False: no response_format; the schema is in the system prompt and the answer is parsed."""
    recording = BY_NAME["ollama-v1__test_ollama_local_native_output_uses_json_schema"]
    server.script(*recording.replies())
    model = make_adapter(recording, server.url, native_output=False)
    result = Agent(model, {}, output=PydanticCity).run("What is the capital of France?")
    assert result.output == PydanticCity(city="Paris", country="France")
    body = server.requests[0].body
    assert "response_format" not in body
    assert '"title":"PydanticCity"' in body["messages"][0]["content"]


def test_a_recorded_answer_failing_a_stricter_schema_is_sent_back_then_rejected(server):
    """The real reply, held to a schema it does not meet: sent back as invalid, then answer_rejected output_invalid."""
    recording = BY_NAME["ollama__docs_structured_outputs"]
    schema = {**recording.request(0)["format"], "required": ["age", "available", "name"]}
    server.script(recording.reply(0), recording.reply(0))
    agent = Agent(make_adapter(recording, server.url), {}, output=schema, limits=Limits(output_retries=1))
    result = agent.run("Ollama is 22 years old")
    assert result.stop is Stop.ANSWER_REJECTED and result.code == "output_invalid" and result.output is None
    assert "'name' is a required property" in (result.reason or "")
    retry = server.requests[1].body["messages"][-1]
    assert retry["role"] == "user" and json.loads(retry["content"])["kind"] == "invalid"


def test_the_async_adapter_asks_natively_too(server):
    """achat under arun sends the same native request and reads the same typed answer."""
    recording = BY_NAME["ollama__docs_structured_outputs"]
    schema = recording.request(0)["format"]
    server.script(*recording.replies())

    async def go() -> Any:
        async with make_adapter(recording, server.url) as model:
            return await Agent(model, {}, output=schema).arun("Ollama is 22 years old")

    result = asyncio.run(go())
    assert result.output == {"age": 22, "available": False} and server.requests[0].body["format"] == schema


def _anthropic() -> AnthropicMessages:
    return AnthropicMessages(base_url="http://127.0.0.1:9", model="m", api_key="k")


def test_anthropic_keeps_other_calls_made_beside_the_final_one():
    """A reply calling a tool and final_result at once runs the tool; the model answers again after its result."""
    recording = BY_NAME["anthropic__test_anthropic_tool_output"]
    blocks = [*recording.response(0)["content"], *recording.response(1)["content"]]
    reply = _anthropic().read_reply({**recording.response(1), "content": blocks})
    typed = _anthropic().typed_reply(reply, output_spec(PydanticCity))
    assert [c["function"]["name"] for c in typed.message["tool_calls"]] == ["get_user_country"]


def test_anthropic_asks_for_text_when_a_run_s_tool_is_called_final_result():
    """A tool of the run named final_result keeps its name; the answer is then asked for as text."""
    declarations = [{"type": "function", "function": {"name": "final_result", "parameters": {"type": "object"}}}]
    body = _anthropic().request_body([{"role": "user", "content": "x"}], declarations, output_spec(PydanticCity))
    assert [t["name"] for t in body["tools"]] == ["final_result"] and "tool_choice" not in body
    call = {"id": "t1", "type": "function", "function": {"name": "final_result", "arguments": "{}"}}
    reply = ModelReply({"role": "assistant", "content": None, "tool_calls": [call]}, finish="tool_calls")
    assert _anthropic().typed_reply(reply, output_spec(PydanticCity), declarations) is reply


def test_a_schema_that_is_not_an_object_is_asked_for_as_text():
    """The APIs take only object schemas natively; any other answer schema leaves the request as it was."""
    spec = output_spec({"type": "array", "items": {"type": "integer"}})
    messages = [{"role": "user", "content": "x"}]
    assert "tools" not in _anthropic().request_body(messages, [], spec)
