"""The suite's step watchdog stops a run that cycles without end, on test functions and spec items, in seconds."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from agent_fsm.engine import RUN_MACHINE, _launch, _run, compile_machine
from agent_fsm.scenarios import load_scenario, run_scenario
from tests.step_watchdog import MOVE_FLOOR, STEP_BOUND, WALL_BOUND, RunawayRun, move_counter

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[1]
STEP_GUARD = ROOT / "specs" / "retrieval" / "step-guard.toml"
FALLBACK = ("Executing", "observe", None, "Ready")  # the edge that sends an executed call back to Ready's budget checks


def _broken_machine() -> Any:
    """The run machine with Executing's fallback edge pointed at Proposing: a cycle that skips every budget."""
    vocabulary: dict[str, Any] = {}
    for rows in _run.MACHINE._rows.values():
        for guard, _dest, effects, _event, label in rows:
            if guard is not None:
                vocabulary[label] = guard
            vocabulary.update({effect.__name__: effect for effect in effects})
    edges = tuple(
        attrs.evolve(edge, dest="Proposing") if (edge.source, edge.event, edge.guard, edge.dest) == FALLBACK else edge
        for edge in RUN_MACHINE.edges
    )
    assert edges != RUN_MACHINE.edges, "the fallback edge moved: update FALLBACK"
    return compile_machine(attrs.evolve(RUN_MACHINE, edges=edges), vocabulary)


def break_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Have every run driven by the broken machine until ``monkeypatch`` is undone."""
    broken = _broken_machine()
    monkeypatch.setattr(_run, "MACHINE", broken)
    monkeypatch.setattr(_launch, "MACHINE", broken)


@pytest.fixture
def broken_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """For this test only, every run is driven by the broken machine."""
    break_kernel(monkeypatch)


@pytest.mark.usefixtures("broken_kernel")
def test_a_cycling_run_in_a_test_fails_in_seconds():
    """Under the broken kernel, the step-guard spec's run is stopped by the watchdog this test runs under."""
    started = time.monotonic()
    with pytest.raises(RunawayRun, match="without resting; its last states: .*Proposing -> Executing"):
        run_scenario(load_scenario(STEP_GUARD))
    assert time.monotonic() - started < WALL_BOUND + 10


def test_a_spec_item_is_watched_too(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """
    A spec collected by the scenario plugin (a plain pytest item, no fixtures) fails fast, naming the runaway.

    The spec runs in a pytest process of its own, with the kernel broken there, so only the
    watchdog its conftest installs can stop it; without one it would run until the timeout.
    """
    (pytester.path / "specs").mkdir()
    shutil.copy(STEP_GUARD, pytester.path / "specs" / "step-guard.toml")
    (pytester.path / "specs" / "conftest.py").write_text(
        "import pytest\n"
        "from agent_fsm.scenarios.plugin import pytest_collect_file\n"
        "from tests.step_watchdog import pytest_runtest_protocol\n"
        "from tests.test_step_watchdog import break_kernel\n"
        "break_kernel(pytest.MonkeyPatch())\n"
    )
    # This checkout's agent_fsm and tests packages, whatever the working directory of the inner pytest.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    started = time.monotonic()
    result = pytester.runpytest_subprocess("specs", "-p", "no:cacheprovider", timeout=60)
    took = time.monotonic() - started
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*RunawayRun: a run made * moves in * s without resting*"])
    assert took < WALL_BOUND + 20


def test_the_same_spec_passes_on_the_real_kernel():
    """The watchdog stays silent on the spec whose broken run it stops: the real machine ends it at its step guard."""
    outcome = run_scenario(load_scenario(STEP_GUARD))
    assert outcome.passed, outcome.report()


class _Path:
    """A stand-in run state: only its path is read, to name the last states."""

    path = ("Ready", "Proposing")


def test_wall_time_stops_a_run_whose_moves_are_slow():
    """With one second per move, a run is stopped once past MOVE_FLOOR and WALL_BOUND, long before STEP_BOUND."""
    now = [0.0]
    moved = move_counter(clock=lambda: now[0])
    state = _Path()
    with pytest.raises(RunawayRun, match=f"a run made {MOVE_FLOOR + 1} moves in {MOVE_FLOOR}.0 s"):
        for _ in range(STEP_BOUND):
            now[0] += 1.0
            moved(state, "Executing")


def test_many_cheap_moves_are_stopped_at_the_step_bound():
    """With a clock that never moves, the move count alone stops the run, at STEP_BOUND + 1."""
    moved = move_counter(clock=lambda: 0.0)
    state = _Path()
    for _ in range(STEP_BOUND):
        moved(state, "Executing")
    with pytest.raises(RunawayRun, match=f"a run made {STEP_BOUND + 1} moves in 0.0 s"):
        moved(state, "Executing")


def test_runs_are_counted_apart():
    """Each run (state object) has its own count: many short runs in one test never add up to a runaway."""
    moved = move_counter(steps=10, clock=lambda: 0.0)
    for _ in range(100):
        state = _Path()
        for _ in range(10):
            moved(state, "Ready")
