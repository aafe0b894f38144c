"""Runs compared whole: each run draws a random nonce, so two runs of the same work differ there unless told not to."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import agent_fsm.engine._state as state_module


@contextmanager
def one_nonce() -> Iterator[None]:
    """Every run begun inside draws the same nonce (so the same keys): a sync and an async run then compare equal."""
    drawn = state_module.new_nonce
    state_module.new_nonce = lambda: "0" * 32
    try:
        yield
    finally:
        state_module.new_nonce = drawn
