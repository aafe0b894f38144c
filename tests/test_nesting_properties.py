"""
Agents nested in agents, to depth 3: whatever each level's script, gate and budgets, and whatever a person decides.

Every run ends absorbing within the budgets of every level above it; no
effect escapes its own level's gate; a decision at the top covers exactly
the innermost blocked call, once; every level's transcript is kept, and the
state round-trips at every pause (see :func:`agent_fsm.testing.assert_nested_invariants`).
"""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from agent_fsm import RunResult
from agent_fsm.testing import NestedWorld, assert_nested_invariants, drive_nested, nested_worlds

# Sized by the active profile (tests/conftest.py): the deepest worlds get half as many examples again.
DEEPEST = settings(max_examples=max(settings().max_examples // 2, 10))


def _decide(data: st.DataObject) -> object:
    def decide(result: RunResult) -> bool:
        return data.draw(st.booleans(), label=f"approve {'/'.join(result.blocked_path)}")

    return decide


def _checked(world: NestedWorld, data: st.DataObject) -> None:
    outcome = drive_nested(world, _decide(data))  # type: ignore[arg-type]
    assert_nested_invariants(outcome)
    event(f"depth {world.depth}, ended {outcome.result.stop.value}")
    deepest = max((len(d.path) for d in outcome.decisions), default=0)
    event(f"deepest decision at depth {deepest}")


@given(world=nested_worlds(3), data=st.data())
def test_nested_runs_keep_every_invariant(world: NestedWorld, data: st.DataObject) -> None:
    """Depth 1 to 3, random scripts, gates, limits and decisions: every nested invariant holds."""
    _checked(world, data)


@DEEPEST
@given(world=nested_worlds(3, min_depth=3), data=st.data())
def test_three_levels_deep_keep_every_invariant(world: NestedWorld, data: st.DataObject) -> None:
    """Always three levels: pauses two and three calls deep are decided at the top."""
    _checked(world, data)
