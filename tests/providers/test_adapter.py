"""Adapter settings: arguments over environment, validation at construction, a repr without secrets."""

from __future__ import annotations

import httpx
import pytest

from agent_fsm import Model
from agent_fsm.providers import (
    AnthropicMessages,
    OllamaChat,
    OpenAIChat,
    ProviderConfigError,
)

ANSWER = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}


def _capture(seen: list[httpx.Request]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=ANSWER)

    return httpx.MockTransport(handler)


def test_settings_come_from_the_environment(monkeypatch):
    """OPENAI_BASE_URL, OPENAI_MODEL and OPENAI_API_KEY configure an adapter built without arguments."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://vllm.test:8000/v1/")
    monkeypatch.setenv("OPENAI_MODEL", "qwen2.5-7b")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-secret")
    seen: list[httpx.Request] = []
    model = OpenAIChat(transport=_capture(seen))
    model.chat([{"role": "user", "content": "hi"}])
    assert str(seen[0].url) == "http://vllm.test:8000/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer sk-env-secret"
    assert model.model == "qwen2.5-7b"
    assert "sk-env-secret" not in repr(model)


def test_arguments_win_over_the_environment(monkeypatch):
    """Explicit base_url, model and api_key override the environment variables."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.test/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    seen: list[httpx.Request] = []
    OpenAIChat(base_url="http://arg.test/v1", model="m", api_key="sk-arg", transport=_capture(seen)).chat([])
    assert seen[0].url.host == "arg.test"
    assert seen[0].headers["authorization"] == "Bearer sk-arg"


def test_no_key_sends_no_authorization(monkeypatch):
    """Local servers need no key: without one, no Authorization header is sent."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    seen: list[httpx.Request] = []
    OpenAIChat(base_url="http://local.test/v1", model="m", transport=_capture(seen)).chat([])
    assert "authorization" not in seen[0].headers


def test_provider_defaults(monkeypatch):
    """Without a base URL anywhere, each adapter points at its provider's usual address."""
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OLLAMA_HOST"):
        monkeypatch.delenv(name, raising=False)
    assert OpenAIChat(model="m").base_url == "https://api.openai.com/v1"
    assert AnthropicMessages(model="m").base_url == "https://api.anthropic.com"
    assert OllamaChat(model="m").base_url == "http://127.0.0.1:11434"


def test_a_missing_model_name_is_a_configuration_error(monkeypatch):
    """No model argument and no OPENAI_MODEL: ProviderConfigError naming the variable."""
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    with pytest.raises(ProviderConfigError, match="OPENAI_MODEL"):
        OpenAIChat(base_url="http://x.test/v1")


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"base_url": "ftp://x.test"}, "http:// or https://"),
        ({"base_url": "http://"}, "with a host"),
        ({"read_timeout": 0}, "read_timeout must be a positive number"),
        ({"connect_timeout": -1}, "connect_timeout must be a positive number"),
        ({"max_retries": -1}, "max_retries must be a non-negative integer"),
        ({"max_requests": 2.5}, "max_requests must be a non-negative integer"),
        ({"transport": httpx.MockTransport(lambda r: httpx.Response(200)), "client": httpx.Client()}, "not both"),
    ],
)
def test_unusable_settings_fail_at_construction(options, needle):
    """Bad settings raise ProviderConfigError (a ValueError) before any run, saying what was expected."""
    options.setdefault("base_url", "http://x.test/v1")
    with pytest.raises(ProviderConfigError, match=needle) as caught:
        OpenAIChat(model="m", **options)
    assert isinstance(caught.value, ValueError)


def test_a_bad_base_url_is_shown_without_its_credentials():
    """The configuration error quotes the URL without user info."""
    with pytest.raises(ProviderConfigError) as caught:
        OpenAIChat(base_url="ftp://me:pa55word@x.test", model="m")
    assert "pa55word" not in str(caught.value)


def test_adapters_are_models_and_context_managers():
    """Each adapter satisfies the Model protocol and closes the client it created."""
    for adapter in (OpenAIChat, AnthropicMessages, OllamaChat):
        with adapter(base_url="http://x.test", model="m") as model:
            assert isinstance(model, Model)
            client = model._http.client
        assert client.is_closed
    assert (
        repr(OllamaChat(base_url="http://x.test:1", model="m")) == "OllamaChat(base_url='http://x.test:1', model='m')"
    )


@pytest.mark.parametrize("max_tokens", [0, -5, 1.5, True])
def test_anthropic_max_tokens_must_be_a_positive_integer(max_tokens):
    """max_tokens is required by the API and checked when the adapter is built."""
    with pytest.raises(ProviderConfigError, match="max_tokens must be a positive integer"):
        AnthropicMessages(base_url="http://x.test", model="m", max_tokens=max_tokens)
