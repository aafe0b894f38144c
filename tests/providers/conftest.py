"""Fixtures for the adapter tests: a loopback server per test, a sleep recorder, a fresh support desk."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent_fsm.examples.support_desk import SupportDesk, make_support_desk

from .loopback import LoopbackServer


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """A started loopback server, stopped (and any slow reply released) after the test."""
    loopback = LoopbackServer().start()
    yield loopback
    loopback.stop()


@pytest.fixture
def sleeps() -> list[float]:
    """Collects the waits an adapter asks for, instead of waiting."""
    return []


@pytest.fixture
def desk() -> SupportDesk:
    """A fresh support desk (order A-17, empty effect log)."""
    return make_support_desk()


@pytest.fixture(autouse=True)
def _hermetic_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own provider settings or proxy must not leak into loopback tests."""
    for provider in ("OPENAI", "ANTHROPIC", "OLLAMA", "GEMINI"):
        for suffix in ("BASE_URL", "MODEL", "API_KEY"):
            monkeypatch.delenv(f"{provider}_{suffix}", raising=False)
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    for name in ("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_DEPLOYMENT", "AZURE_OPENAI_API_KEY", "OPENAI_API_VERSION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
