"""A step watchdog for the engine's own suite: a run that moves without end fails in seconds instead of hanging."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from agent_fsm.engine import RunContext

STEP_BOUND = 20_000
"""Moves one run may make in a test: far above any run a test drives (tens of moves), far below a hang."""


class RunawayRun(AssertionError):
    """A run moved STEP_BOUND times: its machine lets it cycle without spending a budget."""


class Watched:
    """
    Where a run in a test keeps its place, with a hook on every move the machine makes.

    The machine moves ``context.where`` (see CompiledMachine): in tests it is
    this stand-in over the context's own, which calls ``moved(state, value)``
    before each move. Stand-ins stack, so a test can watch under the watchdog.
    """

    __slots__ = ("inner", "moved", "state")

    def __init__(self, inner: Any, state: Any, moved: Any) -> None:
        self.inner = inner
        self.state = state
        self.moved = moved

    @property
    def machine_state(self) -> str:
        return self.inner.machine_state  # type: ignore[no-any-return]

    @machine_state.setter
    def machine_state(self, value: str) -> None:
        self.moved(self.state, value)
        self.inner.machine_state = value

    @property
    def path(self) -> list[str]:
        return self.inner.path  # type: ignore[no-any-return]


def watch_moves(monkeypatch: pytest.MonkeyPatch, moved: Any) -> None:
    """Have every run context built from now on call ``moved(state, value)`` before each move of its machine."""
    real = RunContext.__init__

    def init(context: RunContext, *args: Any, **kwargs: Any) -> None:
        real(context, *args, **kwargs)
        context.where = Watched(context.where, context.state, moved)

    monkeypatch.setattr(RunContext, "__init__", init)


@pytest.fixture(autouse=True)
def step_watchdog(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[int]]:
    """Count each run's moves (by its state object) and stop one that passes STEP_BOUND, naming its path."""
    moves: Counter[int] = Counter()

    def move(state: Any, value: str) -> None:
        key = id(state)
        moves[key] += 1
        if moves[key] > STEP_BOUND:
            tail = " -> ".join(state.path[-12:])
            raise RunawayRun(f"a run made {STEP_BOUND} moves without resting; its last states: {tail}")

    watch_moves(monkeypatch, move)
    yield moves
