"""
OpenAI-compatible chat completions: OpenAI itself, vLLM, llama.cpp's server, Ollama's ``/v1``.

The engine's transcript already is this wire format, so the request carries
it unchanged and the reply's ``choices[0].message`` is handed back as it came:
repairing a broken tool call is the engine's job, not the adapter's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm.engine.models import ModelReply
from agent_fsm.providers._adapter import HttpModel, object_of
from agent_fsm.providers._http import prompt_tokens

__all__ = ["OpenAIChat"]


class OpenAIChat(HttpModel):
    """
    A model behind ``POST {base_url}/chat/completions``.

    ``base_url`` includes the API version, as OpenAI's own clients expect:
    ``https://api.openai.com/v1`` (the default), ``http://127.0.0.1:8000/v1``
    for vLLM, ``http://127.0.0.1:8080/v1`` for llama.cpp,
    ``http://127.0.0.1:11434/v1`` for Ollama. Environment: ``OPENAI_BASE_URL``,
    ``OPENAI_MODEL``, ``OPENAI_API_KEY`` (sent as a bearer token when set).
    See :class:`HttpModel` for the transport options.
    """

    provider = "openai"
    base_url_env = "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"
    model_env = "OPENAI_MODEL"
    api_key_env = "OPENAI_API_KEY"
    path = "/chat/completions"

    def request_body(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The transcript as is, plus the declarations (omitted when empty: some servers reject ``[]``)."""
        body: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages]}
        if tools:
            body["tools"] = [dict(t) for t in tools]
        return self._with_options(body)

    def read_reply(self, data: Any, status: int = 200) -> ModelReply:
        """``choices[0].message`` and ``usage.prompt_tokens``."""
        reply = object_of(data)
        if reply is None:
            raise self._bad(f"expected a JSON object with 'choices', got {type(data).__name__}", status)
        choices = reply.get("choices")
        if not isinstance(choices, list) or not choices:
            raise self._bad(f"the reply has no choices (keys: {sorted(reply)})", status)
        choice = object_of(choices[0]) or {}
        message = object_of(choice.get("message"))
        if message is None:
            raise self._bad("choices[0] carries no message object", status)
        if message.get("content") is None and not message.get("tool_calls"):
            reason = choice.get("finish_reason")
            raise self._bad(f"the message has neither content nor tool_calls (finish_reason={reason!r})", status)
        usage = object_of(reply.get("usage")) or {}
        return ModelReply(message, prompt_tokens=prompt_tokens(usage.get("prompt_tokens")))
