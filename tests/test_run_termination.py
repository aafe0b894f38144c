"""The kit's dynamic termination check, run on the engine's own run machine."""

from __future__ import annotations

from typing import Any

from hypothesis import Phase, settings
from hypothesis import strategies as st

from agent_fsm import Limits, RunState, ToolSpec
from agent_fsm.engine import RunContext, start_state
from agent_fsm.engine._run import MACHINE
from agent_fsm.testing import check_machine_terminates, gates, scripted_models

FAST = settings(max_examples=60, database=None, derandomize=True, phases=[p for p in Phase if p is not Phase.explain])

TOOLS = {
    "lookup": ToolSpec("Look a word up.", {"word": str}, lambda word: word),
    "pay": ToolSpec("Pay. Moves money.", {"cents": int}, lambda cents: cents, effectful=True),
}

# The run machine's budgets, read off a run: each only grows (see its declaration).
COUNTERS = {
    "turns": lambda run: run.state.turns,
    "pending_calls": lambda run: len(run.state.observations),  # each call of a reply answered once
    "decisions": lambda run: 0,  # a pause rests: this walk never decides one
}


def _run(model: Any, gate: Any, limits: Limits) -> RunContext:
    state: RunState = start_state("a task")
    state.limits = limits
    return RunContext(state, model, TOOLS, gate, limits, lambda message: 1)


RUNS = st.builds(
    _run,
    scripted_models(TOOLS, max_size=8),
    gates(TOOLS),
    st.builds(Limits, max_turns=st.integers(0, 6), repeated_denials=st.integers(1, 3), max_tool_calls=st.none()),
)


def test_the_run_machine_ends_along_every_path_it_takes() -> None:
    """Random scripts, gates and budgets: every walk of the run machine rests, each cycle spending turns or calls."""
    coverage = check_machine_terminates(
        MACHINE, RUNS, counters=COUNTERS, limits=lambda run: {"turns": run.limits.max_turns}, settings=FAST
    )
    assert coverage.runs >= 60
