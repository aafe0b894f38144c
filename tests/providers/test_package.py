"""The providers package is optional: the core never imports httpx, and a missing httpx is explained."""

from __future__ import annotations

import subprocess
import sys

import agent_fsm.providers as providers


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_the_core_does_not_import_httpx():
    """Importing agent_fsm and running the demo model leaves httpx unimported."""
    done = _python("import sys, agent_fsm, agent_fsm.examples.demo; print('httpx' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_without_httpx_the_import_error_names_the_extra():
    """With httpx unavailable, importing agent_fsm.providers says which extra to install."""
    done = _python("import sys; sys.modules['httpx'] = None; import agent_fsm.providers")
    assert done.returncode != 0
    assert "ModuleNotFoundError" in done.stderr
    assert "pip install 'agent_fsm[providers]'" in done.stderr


def test_the_public_surface_is_pinned():
    """__all__ lists exactly the public names, and each one exists."""
    assert sorted(providers.__all__) == [
        "AnthropicMessages",
        "AzureOpenAIChat",
        "FAILURE_KINDS",
        "GeminiGenerate",
        "HttpModel",
        "OllamaChat",
        "OpenAIChat",
        "OpenAIResponses",
        "PROVIDERS",
        "ProviderConfigError",
        "build_model",
        "from_anthropic_message",
        "to_anthropic_messages",
    ]
    assert all(hasattr(providers, name) for name in providers.__all__)
