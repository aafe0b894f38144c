"""
No-progress bookkeeping: O(1) per rejection, whatever the run's length.

Each rejected proposal is counted by its fingerprint, and the last two are
remembered so that an alternation (A, B, A, B ...) is seen as it grows. A
run that keeps proposing what was refused ends ``no_progress``: the same
proposal ``Limits.repeated_denials`` times, or two in alternation over
``Limits.oscillation`` consecutive rejections.
"""

from __future__ import annotations

from agent_fsm.engine.limits import Limits
from agent_fsm.engine.state import RunState

__all__ = ["count_rejection", "no_progress", "no_progress_reason"]


def count_rejection(state: RunState, key: str) -> None:
    """Count the rejection of the proposal fingerprinted ``key``."""
    state.denials[key] = state.denials.get(key, 0) + 1
    recent = state.recent_rejections
    if len(recent) == 2 and key == recent[0] and key != recent[1]:
        state.alternation += 1  # ... A, B, A: the alternation goes on
    elif recent and key != recent[-1]:
        state.alternation = 2  # B after A: an alternation may be starting
    else:
        state.alternation = 1
    state.recent_rejections = [*recent[-1:], key]


def _repeated(state: RunState, limits: Limits) -> bool:
    return (
        bool(state.recent_rejections) and state.denials.get(state.recent_rejections[-1], 0) >= limits.repeated_denials
    )


def no_progress(state: RunState, limits: Limits) -> bool:
    """The latest rejection crossed a threshold (only it can have: O(1))."""
    return bool(state.recent_rejections) and (_repeated(state, limits) or state.alternation >= limits.oscillation)


def no_progress_reason(state: RunState, limits: Limits, last: object) -> str:
    """Why the run ended ``no_progress``, in words, ending with the last rejection's reason."""
    if _repeated(state, limits):
        return f"the same rejected proposal came back {limits.repeated_denials} times: {last}"
    return f"two rejected proposals alternated over {state.alternation} consecutive rejections: {last}"
