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
