"""
Real model adapters over HTTP: OpenAI-compatible servers (Azure OpenAI too), the OpenAI Responses API,
Anthropic Messages, Gemini, Ollama.

Each adapter is a :class:`agent_fsm.Model`: it takes the engine's
OpenAI-wire transcript and tool declarations, returns an assistant message
with the provider's prompt token count, and raises
:class:`agent_fsm.ProviderFailure` (so the run ends ``provider_error``) with a
``kind`` and, for HTTP failures, a ``status`` when no reply can be had.

Needs the ``providers`` extra: ``pip install 'agent_fsm[providers]'``.
"""

try:
    import httpx as _httpx  # noqa: F401
except ModuleNotFoundError as _exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ModuleNotFoundError(
        "agent_fsm.providers needs httpx, which the 'providers' extra installs: pip install 'agent_fsm[providers]'",
        name="httpx",
    ) from _exc

from agent_fsm.providers._adapter import HttpModel
from agent_fsm.providers._anthropic import AnthropicMessages, from_anthropic_message, to_anthropic_messages
from agent_fsm.providers._factory import PROVIDERS, build_model
from agent_fsm.providers._gemini import GeminiGenerate
from agent_fsm.providers._http import FAILURE_KINDS, ProviderConfigError
from agent_fsm.providers._ollama import OllamaChat
from agent_fsm.providers._openai import AzureOpenAIChat, OpenAIChat
from agent_fsm.providers._responses import OpenAIResponses

__all__ = [
    # Adapters
    "OpenAIChat",
    "AzureOpenAIChat",
    "AnthropicMessages",
    "OllamaChat",
    "OpenAIResponses",
    "GeminiGenerate",
    "HttpModel",
    # Building one by name
    "build_model",
    "PROVIDERS",
    # Wire conversion
    "to_anthropic_messages",
    "from_anthropic_message",
    # Failures
    "FAILURE_KINDS",
    "ProviderConfigError",
]
