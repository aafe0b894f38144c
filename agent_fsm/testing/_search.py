"""
How the kit's one-call checks run their property search: under the default
settings unless given others, with the coverage in a failure's notes.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import settings as Settings
from hypothesis import strategies as st

from agent_fsm.testing._coverage import Coverage
from agent_fsm.testing._invariants import InvariantViolation
from agent_fsm.testing._settings import default_settings

__all__ = ["run_property", "searched"]


def run_property(test: Callable[..., None], settings: Settings | None) -> None:
    # Hypothesis's "explain" phase re-runs a failing run hundreds of times to
    # say which parts could vary; for whole runs that costs more than the
    # search itself, so the checks skip it unless given settings ask for it.
    # Each example is a whole run, slow to draw by Hypothesis's measure on a
    # loaded machine: the too_slow and data_too_large health checks would
    # fail a correct search there, so the checks suppress them by default.
    (settings if settings is not None else default_settings())(given(st.data())(test))()


def searched(coverage: Coverage, report: bool, search: Callable[[], None]) -> Coverage:
    """Run a check's search; its coverage goes into a failure's notes, and is printed or kept as asked."""
    try:
        search()
    except InvariantViolation as exc:
        exc.add_note(coverage.report())
        coverage.publish(report)
        raise
    coverage.publish(report)
    return coverage
