"""The code of docs/first-model.md's first example and of docs/providers.md runs, against the loopback server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent_fsm import Stop
from agent_fsm.providers import FAILURE_KINDS

from .loopback import (
    anthropic_reply,
    free_port_refusing,
    ollama_reply,
    openai_answer,
    openai_tool_call,
)
from .recordings import NATIVE_RECORDINGS, RECORDINGS, STREAMS

ROOT = Path(__file__).resolve().parents[2]
BY_NAME = {r.name: r for r in RECORDINGS}
STREAMS_BY_NAME = {r.name: r for r in STREAMS}
LOOKUP = '{"order_id": "A-17"}'


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    following = text.find("\n## ", start + len(heading))
    return text[start:] if following == -1 else text[start:following]


def _execute(code: str, replacements: dict[str, str]) -> dict:
    for old, new in replacements.items():
        assert old in code, f"the example no longer uses {old}"
        code = code.replace(old, new)
    namespace: dict = {"__name__": "__doc_example__"}
    exec(compile(code, "<doc example>", "exec"), namespace)
    return namespace


@pytest.fixture
def doc() -> str:
    return (ROOT / "docs" / "providers.md").read_text()


def test_readme_example_runs_against_a_local_openai_compatible_server(server, capsys):
    """The first-model example: a lookup, then an answer, printed as 'answered <text>'."""
    blocks = _python_blocks((ROOT / "docs" / "first-model.md").read_text())[:1]
    assert len(blocks) == 1
    server.script(openai_tool_call("call_1", "lookup_order", LOOKUP), openai_answer("You paid 4999 cents."))
    namespace = _execute(blocks[0], {"http://127.0.0.1:8080/v1": server.url + "/v1"})
    assert namespace["result"].stop is Stop.ANSWERED
    assert capsys.readouterr().out == "answered You paid 4999 cents.\n"
    assert server.requests[0].body["model"] == "qwen2.5-7b-instruct"


def test_docs_has_one_example_per_topic(doc):
    """Ten runnable examples: OpenAI-compatible, Anthropic, Ollama, Azure, a cut-off reply, a failure, streaming
    (two), the Responses API and Gemini."""
    assert len(_python_blocks(doc)) == 10


def test_streaming_example_prints_each_fragment_of_a_recorded_stream(server, doc, capsys):
    """``stream=True``: api.openai.com's recorded stream, its two fragments printed as they come, then the reply."""
    recording = STREAMS_BY_NAME["openai__test_openai_moderation_stream"]
    server.script(recording.reply(0))
    _execute(_python_blocks(doc)[6], {"http://127.0.0.1:8080/v1": server.url + "/v1"})
    assert capsys.readouterr().out == "Paris|.|\nTrue Paris. 13 stop\n"
    assert server.requests[0].body["stream_options"] == {"include_usage": True}


def test_async_example_streams_a_recorded_tool_call(server, doc, capsys):
    """``achat`` with an async listener: Anthropic's recorded text, then the call whose input came in five pieces."""
    recording = STREAMS_BY_NAME["anthropic__sdk_tool_use_response"]
    server.script(recording.reply(0))
    _execute(_python_blocks(doc)[7], {"http://127.0.0.1:8081": server.url})
    out = capsys.readouterr().out
    assert out == (
        "I'll check the current weather in Paris for you.\n"
        "tool_calls {'name': 'get_weather', 'arguments': '{\"location\": \"Paris\"}'}\n"
    )
    assert server.requests[0].body["stream"] is True


def test_openai_example_refunds_within_policy(server, doc, capsys):
    """The vLLM example: an over-limit refund is denied, the in-policy one lands, usage is reported."""
    server.script(
        openai_tool_call("c1", "refund_order", '{"order_id": "A-17", "amount_cents": 9999}', prompt_tokens=300),
        openai_tool_call("c2", "refund_order", '{"order_id": "A-17", "amount_cents": 4999}', prompt_tokens=360),
        openai_answer("Refunded 4999 cents.", prompt_tokens=420),
    )
    namespace = _execute(_python_blocks(doc)[0], {"http://127.0.0.1:8000/v1": server.url + "/v1"})
    assert namespace["desk"].effects == [{"order_id": "A-17", "refunded_cents": 4999}]
    assert capsys.readouterr().out == "answered [{'order_id': 'A-17', 'refunded_cents': 4999}] [300, 360, 420]\n"
    assert server.requests[0].body["temperature"] == 0


def test_anthropic_example_reads_its_settings_from_the_environment(server, doc, capsys, monkeypatch):
    """ANTHROPIC_BASE_URL, ANTHROPIC_MODEL and ANTHROPIC_API_KEY configure the example."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_MODEL", "claude-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ak-doc")
    server.script(
        anthropic_reply({"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {"order_id": "A-17"}}),
        anthropic_reply({"type": "text", "text": "It came broken."}),
    )
    _execute(_python_blocks(doc)[1], {})
    assert capsys.readouterr().out == "answered It came broken.\n"
    assert server.requests[0].headers["x-api-key"] == "ak-doc"
    assert server.requests[0].body["max_tokens"] == 512


def test_ollama_example_prints_synthesized_ids(server, doc, capsys):
    """The Ollama example prints the ids the adapter made for id-less calls."""
    server.script(
        ollama_reply({"tool_calls": [{"function": {"name": "lookup_order", "arguments": {"order_id": "A-17"}}}]}),
        ollama_reply({"content": "4999 cents."}),
    )
    _execute(_python_blocks(doc)[2], {"http://127.0.0.1:11434": server.url})
    assert capsys.readouterr().out == "answered ['ollama_0_0']\n"
    assert server.requests[0].body["options"] == {"num_ctx": 8192}


def test_failure_example_ends_provider_error(doc, capsys):
    """The failure example: nothing listens, so the run ends provider_error with kind transport."""
    _execute(_python_blocks(doc)[5], {"http://127.0.0.1:9/v1": free_port_refusing() + "/v1"})
    out = capsys.readouterr().out
    assert out.startswith("transport None openai: POST http://127.0.0.1:")
    assert "could not connect" in out


def test_the_failure_table_lists_every_kind(doc):
    """The kinds table in the docs names exactly the kinds the adapters raise."""
    table = _section(doc, "## Failures")
    assert set(re.findall(r"^\| `(\w+)` \|", table, flags=re.M)) == set(FAILURE_KINDS)


def test_readme_example_without_a_server_ends_provider_error_at_once(capsys):
    """With nothing listening, the first-model example prints a provider_error after one attempt, no retry."""
    blocks = _python_blocks((ROOT / "docs" / "first-model.md").read_text())[:1]
    namespace = _execute(blocks[0], {"http://127.0.0.1:8080/v1": free_port_refusing() + "/v1"})
    assert namespace["result"].stop is Stop.PROVIDER_ERROR
    assert namespace["model"].requests_made == 1
    assert capsys.readouterr().out.startswith("provider_error ProviderFault(type='ProviderFailure', kind='transport'")


def test_azure_example_posts_to_the_deployment_with_the_api_key_header(server, doc, capsys):
    """The Azure example: the deployment path, ?api-version=, the api-key header; a recorded OpenAI answer."""
    recording = BY_NAME["openai__test_valid_response"]
    server.script(recording.reply(0))
    _execute(_python_blocks(doc)[3], {"https://my-resource.openai.azure.com": server.url})
    text = recording.response(0)["choices"][0]["message"]["content"]
    assert capsys.readouterr().out == f"answered {text}\n"
    assert server.requests[0].path == "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
    assert server.requests[0].headers["api-key"] == "azure-key"


def test_cut_off_example_refuses_then_accepts_the_recorded_length_reply(server, doc, capsys):
    """The finish example, over Hugging Face's recorded finish_reason 'length': refused, then accepted on request."""
    recording = BY_NAME["huggingface__test_max_completion_tokens"]
    server.script(recording.reply(0), recording.reply(0))
    _execute(_python_blocks(doc)[4], {"http://127.0.0.1:8080/v1": server.url + "/v1"})
    text = recording.response(0)["choices"][0]["message"]["content"]
    assert capsys.readouterr().out == f"answered {text}\n"
    assert server.requests[0].body["max_tokens"] == 5


def test_the_hosts_table_counts_the_recordings(doc):
    """The 'Providers and hosts tried' table gives each host the number of recordings the fixtures hold."""
    table = _section(doc, "## Providers and hosts tried")
    counts = {name: int(n) for name, n in re.findall(r"^\| ([^|]+?) \| `\w+` \| (\d+) \|", table, flags=re.M)}
    hosts = {
        "api.openai.com": ["openai"],
        "api.anthropic.com": ["anthropic"],
        "Ollama (`/api/chat`)": ["ollama"],
        "Groq": ["groq"],
        "OpenRouter": ["openrouter"],
        "DeepSeek": ["deepseek"],
        "Cerebras": ["cerebras"],
        "Hugging Face router (Together and others)": ["huggingface"],
        "Mistral": ["mistral"],
        "Gemini (OpenAI-compatible)": ["gemini"],
        "Z.ai": ["zai"],
        "Crusoe": ["crusoe"],
        "Ollama Cloud and local `/v1`": ["ollama-cloud", "ollama-v1"],
    }
    native = {
        "api.openai.com (`/v1/responses`)": "responses",
        "generativelanguage.googleapis.com and Vertex AI": "gemini",
    }
    expected = {name: sum(1 for r in RECORDINGS if r.host in keys) for name, keys in hosts.items()}
    expected.update({name: sum(1 for r in NATIVE_RECORDINGS if r.adapter == a) for name, a in native.items()})
    assert counts == expected
    assert f"replays {len(RECORDINGS)} recordings" in table


def test_responses_example_runs_the_recorded_tool_call_and_sends_a_cache_key(server, doc, capsys):
    """The Responses example over api.openai.com's recorded run: the call, its output, the answer; one cache key."""
    recording = next(r for r in NATIVE_RECORDINGS if r.name.endswith("simple_response_with_tool_call"))
    server.script(*recording.replies())
    block = _section(doc, "## OpenAI Responses API")
    _execute(_python_blocks(block)[0], {'model="gpt-4o"': f'model="gpt-4o", base_url="{server.url}/v1", api_key="k"'})
    assert capsys.readouterr().out == "answered The capital of PotatoLand is Potato City.\n"
    first, second = (r.body for r in server.requests)
    assert first["prompt_cache_key"] == second["prompt_cache_key"]
    assert [i.get("type") for i in second["input"]][-2:] == ["function_call", "function_call_output"]


def test_gemini_example_sends_the_recorded_signature_back(server, doc, capsys):
    """The Gemini example over gemini-2.5-pro's recorded run: the answer, and the signed call part sent back."""
    recording = next(r for r in NATIVE_RECORDINGS if r.name == "google__test_google_text_output_function")
    server.script(*recording.replies())
    block = _section(doc, "## Gemini")
    _execute(_python_blocks(block)[0], {'model="gemini-2.5-pro"': f'model="gemini-2.5-pro", base_url="{server.url}"'})
    assert capsys.readouterr().out == "answered The largest city in Mexico is Mexico City.\n1 signed part sent back\n"
    signed = recording.response(0)["candidates"][0]["content"]["parts"][0]
    assert signed in server.requests[1].body["contents"][1]["parts"]
    assert server.requests[0].body["generationConfig"]["thinkingConfig"] == {"includeThoughts": True}
