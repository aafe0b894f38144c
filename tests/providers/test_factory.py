"""build_model: a provider's name to a configured adapter."""

from __future__ import annotations

import pytest

from agent_fsm.providers import (
    PROVIDERS,
    AnthropicMessages,
    GeminiGenerate,
    OllamaChat,
    OpenAIChat,
    OpenAIResponses,
    ProviderConfigError,
    build_model,
)


@pytest.mark.parametrize(
    ("name", "adapter"),
    [
        ("openai", OpenAIChat),
        ("openai-responses", OpenAIResponses),
        ("anthropic", AnthropicMessages),
        ("gemini", GeminiGenerate),
        ("ollama", OllamaChat),
    ],
)
def test_each_provider_name_builds_its_adapter(name, adapter):
    """Each name builds its adapter, with the settings given."""
    model = build_model(name, base_url="http://127.0.0.1:9", model="m", api_key="k-123", read_timeout=3)
    assert type(model) is adapter
    assert (model.base_url, model.model) == ("http://127.0.0.1:9", "m")
    assert model._http.timeout.read == 3


def test_adapter_specific_options_pass_through():
    """max_tokens reaches the Anthropic adapter, options the Ollama one."""
    assert build_model("anthropic", model="m", max_tokens=99).max_tokens == 99
    assert build_model("ollama", model="m", options={"seed": 1}).options == {"seed": 1}


def test_an_unknown_provider_names_the_known_ones():
    """A typo lists what is accepted."""
    with pytest.raises(
        ProviderConfigError, match="expected one of anthropic, azure, gemini, ollama, openai, openai-responses"
    ):
        build_model("opneai", model="m")
    assert sorted(PROVIDERS) == ["anthropic", "azure", "gemini", "ollama", "openai", "openai-responses"]


def test_an_option_the_adapter_does_not_take_is_a_configuration_error():
    """An unexpected keyword is reported as ProviderConfigError naming the provider."""
    with pytest.raises(ProviderConfigError, match="openai: .*max_tokens"):
        build_model("openai", model="m", max_tokens=10)
