"""The adapters report what a call used (tokens in, out, cached; the answering model) and take the run's output cap."""

from __future__ import annotations

from decimal import Decimal

from agent_fsm import Agent, Limits, Price, Prices, Stop
from agent_fsm.providers import AnthropicMessages, OllamaChat, OpenAIChat

from .loopback import anthropic_reply, json_reply, ollama_reply

PRICES = Prices(default=Price(Decimal("1"), Decimal("2"), cached_input=Decimal("0.5")))


def test_openai_usage_and_cap(server, sleeps):
    """completion_tokens and prompt_tokens_details.cached_tokens are charged; the cap becomes max_tokens."""
    server.script(
        json_reply(
            {
                "model": "gpt-x-2026",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                "usage": {
                    "prompt_tokens": 300,
                    "completion_tokens": 40,
                    "prompt_tokens_details": {"cached_tokens": 100},
                },
            }
        )
    )
    model = OpenAIChat(base_url=server.url + "/v1", model="gpt-x", sleep=sleeps.append)
    limits = Limits(max_output_tokens=64, max_cost=Decimal("1"))
    result = Agent(model, {}, limits=limits, prices=PRICES).run("hi")
    assert result.stop is Stop.ANSWERED
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (300, 40, 100)
    assert usage.cost == (200 * 1 + 100 * Decimal("0.5") + 40 * 2) / Decimal(1_000_000)
    assert server.requests[0].body["max_tokens"] == 64


def test_openai_keeps_a_lower_cap_of_its_own(server, sleeps):
    """An adapter's own lower max_completion_tokens stands; the run's cap only lowers it."""
    server.script(
        json_reply({"choices": [{"message": {"role": "assistant", "content": "a"}, "finish_reason": "stop"}]})
    )
    model = OpenAIChat(
        base_url=server.url + "/v1", model="m", sleep=sleeps.append, extra_body={"max_completion_tokens": 10}
    )
    Agent(model, {}, limits=Limits(max_output_tokens=64)).run("hi")
    body = server.requests[0].body
    assert body["max_completion_tokens"] == 10 and "max_tokens" not in body


def test_anthropic_usage_and_cap(server, sleeps):
    """output_tokens and cache_read_input_tokens are reported; the run's cap lowers max_tokens."""
    server.script(anthropic_reply({"type": "text", "text": "hello"}, input_tokens=70))
    model = AnthropicMessages(base_url=server.url, model="claude-test", sleep=sleeps.append, max_tokens=1024)
    result = Agent(model, {}, limits=Limits(max_output_tokens=128)).run("hi")
    assert (result.usage.input_tokens, result.usage.output_tokens) == (70, 15)
    assert server.requests[0].body["max_tokens"] == 128


def test_ollama_usage_and_cap(server, sleeps):
    """eval_count is the output; the cap is options.num_predict."""
    server.script(ollama_reply({"content": "hi"}, prompt_eval_count=80))
    model = OllamaChat(base_url=server.url, model="llama3.2", sleep=sleeps.append)
    result = Agent(model, {}, limits=Limits(max_output_tokens=32)).run("hi")
    assert (result.usage.input_tokens, result.usage.output_tokens) == (80, 20)
    assert server.requests[0].body["options"]["num_predict"] == 32
