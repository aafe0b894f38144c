"""A step watchdog for the engine's own suite: a run that moves without end fails in seconds instead of hanging."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from agent_fsm.engine import RunContext

STEP_BOUND = 20_000
"""Moves one run may make in a test: far above any run a test drives (tens of moves), far below a hang."""


class RunawayRun(AssertionError):
    """A run moved STEP_BOUND times: its machine lets it cycle without spending a budget."""


@pytest.fixture(autouse=True)
def step_watchdog(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[int]]:
    """Count each run's moves (by its state object) and stop one that passes STEP_BOUND, naming its path."""
    moves: Counter[int] = Counter()
    real = RunContext.machine_state

    def move(context: RunContext, value: str) -> None:
        key = id(context.state)
        moves[key] += 1
        if moves[key] > STEP_BOUND:
            tail = " -> ".join(context.state.path[-12:])
            raise RunawayRun(f"a run made {STEP_BOUND} moves without resting; its last states: {tail}")
        assert real.fset is not None
        real.fset(context, value)

    monkeypatch.setattr(RunContext, "machine_state", property(real.fget, move))
    yield moves
