"""
One entry point from a provider's name to a ready adapter, for command lines and configuration files.
"""

from __future__ import annotations

from typing import Any

from agent_fsm.providers._adapter import HttpModel
from agent_fsm.providers._anthropic import AnthropicMessages
from agent_fsm.providers._gemini import GeminiGenerate
from agent_fsm.providers._http import ProviderConfigError
from agent_fsm.providers._ollama import OllamaChat
from agent_fsm.providers._openai import AzureOpenAIChat, OpenAIChat
from agent_fsm.providers._responses import OpenAIResponses

__all__ = ["PROVIDERS", "build_model"]

PROVIDERS: dict[str, type[HttpModel]] = {
    "openai": OpenAIChat,
    "azure": AzureOpenAIChat,
    "anthropic": AnthropicMessages,
    "ollama": OllamaChat,
    "openai-responses": OpenAIResponses,
    "gemini": GeminiGenerate,
}
"""Provider names :func:`build_model` accepts, and the adapter each one builds."""


def build_model(
    provider: str,
    *,
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    **options: Any,
) -> HttpModel:
    """
    The adapter for ``provider`` ("openai", "openai-responses", "azure", "anthropic", "gemini" or "ollama").

    ``base_url``, ``model`` and ``api_key`` fall back to the provider's
    environment variables; ``options`` go to the adapter unchanged (timeouts,
    retries, ``max_requests``, ``transport``...).

    Raises:
        ProviderConfigError: unknown provider, missing model name, or an unusable setting.
    """
    adapter = PROVIDERS.get(provider)
    if adapter is None:
        raise ProviderConfigError(f"unknown provider {provider!r}; expected one of {', '.join(sorted(PROVIDERS))}")
    try:
        return adapter(base_url=base_url, model=model, api_key=api_key, **options)
    except TypeError as exc:
        # An option this adapter does not take is a configuration mistake worth naming.
        raise ProviderConfigError(f"{provider}: {exc}") from exc
