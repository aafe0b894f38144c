"""
A step watchdog for the engine's own suite: a run that moves without end fails in seconds instead of hanging.

It is a pytest hook, not a fixture, so it watches every item a conftest
collects: test functions and the scenario plugin's spec items alike (a spec
item is a plain ``pytest.Item``, which no fixture reaches). It counts each
run's moves and the time since its first one: a run fails once it passes
STEP_BOUND moves, or once it has made more than MOVE_FLOOR moves and is still
moving WALL_BOUND seconds after it began, however long each move takes.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Generator
from typing import Any

import pytest

from agent_fsm.engine import RunContext

STEP_BOUND = 20_000
"""Moves one run may make in a test: far above any run a test drives (hundreds of moves at most), far below a hang."""

MOVE_FLOOR = 200
"""Moves past which a run is also held to WALL_BOUND: more than nearly every run a test drives (tens of moves)."""

WALL_BOUND = 5.0
"""Seconds a run past MOVE_FLOOR may keep moving: the longest walks a test drives (2,000 moves) take well under one."""


class RunawayRun(AssertionError):
    """A run moved past the watchdog's bounds: its machine lets it cycle without spending a budget."""


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


def move_counter(
    steps: int = STEP_BOUND,
    floor: int = MOVE_FLOOR,
    seconds: float = WALL_BOUND,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[Any, str], None]:
    """A ``moved`` hook that counts each run's moves and raises RunawayRun past the bounds."""
    # Keyed by id(state), with a weak reference that tells a new run from an
    # earlier one whose freed state left it the same id.
    runs: dict[int, tuple[weakref.ref[Any], list[float]]] = {}

    def moved(state: Any, value: str) -> None:
        entry = runs.get(id(state))
        if entry is None or entry[0]() is not state:
            entry = runs[id(state)] = (weakref.ref(state), [0, clock()])
        seen = entry[1]
        seen[0] += 1
        moves = int(seen[0])
        if moves > steps or (moves > floor and clock() - seen[1] > seconds):
            tail = " -> ".join([*state.path[-11:], value])
            took = clock() - seen[1]
            raise RunawayRun(f"a run made {moves} moves in {took:.1f} s without resting; its last states: {tail}")

    return moved


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """Watch every run the item starts, in its set-up, its call and its tear-down."""
    with pytest.MonkeyPatch.context() as patch:
        watch_moves(patch, move_counter())
        return (yield)
