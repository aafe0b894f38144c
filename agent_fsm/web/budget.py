"""
The budgets as a run spent them, laid out for a small SVG chart: each prompt's tokens against the ceiling.

Only numbers leave this module (coordinates, counts); the template draws
them, so the chart needs no script and no stylesheet of its own.
"""

from __future__ import annotations

import attrs

from agent_fsm.engine import Limits, RunState

__all__ = ["Bar", "BudgetChart", "Meter", "budget_chart"]

WIDTH, HEIGHT = 560, 170
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 12, 14, 28


@attrs.frozen
class Bar:
    """One model call's prompt: where its bar goes, and its size in tokens."""

    turn: int
    x: float
    y: float
    width: float
    height: float
    tokens: int
    over: bool  # above the ceiling (a provider's count can exceed the estimate the engine admitted)


@attrs.frozen
class Meter:
    """A budget as a bar of ``fraction`` (0 to 1) full: ``used`` of ``limit`` (``limit`` None: unlimited)."""

    label: str
    used: int
    limit: int | None
    fraction: float


@attrs.frozen
class BudgetChart:
    """The prompt-token bars with the ceiling's height, and the turn and tool-attempt meters."""

    width: int
    height: int
    plot_left: int
    plot_bottom: float
    plot_right: float
    bars: tuple[Bar, ...]
    ceiling_y: float
    ceiling: int
    meters: tuple[Meter, ...]


def _meter(label: str, used: int, limit: int | None) -> Meter:
    fraction = 0.0 if not limit else min(1.0, used / limit)
    return Meter(label, used, limit, 1.0 if limit == 0 else fraction)


def budget_chart(state: RunState) -> BudgetChart:
    """The chart of ``state``'s spending against its saved limits (the defaults if it saved none)."""
    limits = state.limits or Limits()
    log = list(state.prompt_token_log)
    top = max([limits.max_prompt_tokens, *log, 1]) * 1.1
    plot_h = HEIGHT - _TOP - _BOTTOM
    plot_w = WIDTH - _LEFT - _RIGHT
    slots = max(len(log), limits.max_turns, 1)
    slot = plot_w / slots
    bars = []
    for index, tokens in enumerate(log):
        height = plot_h * tokens / top
        bars.append(
            Bar(
                turn=index + 1,
                x=round(_LEFT + index * slot + slot * 0.15, 1),
                y=round(_TOP + plot_h - height, 1),
                width=round(slot * 0.7, 1),
                height=round(height, 1),
                tokens=tokens,
                over=tokens > limits.max_prompt_tokens,
            )
        )
    meters = [
        _meter("model calls", state.turns, limits.max_turns),
        _meter("tool attempts", state.tool_attempts, limits.max_tool_calls),
    ]
    return BudgetChart(
        width=WIDTH,
        height=HEIGHT,
        plot_left=_LEFT,
        plot_bottom=_TOP + plot_h,
        plot_right=WIDTH - _RIGHT,
        bars=tuple(bars),
        ceiling_y=round(_TOP + plot_h - plot_h * limits.max_prompt_tokens / top, 1),
        ceiling=limits.max_prompt_tokens,
        meters=tuple(meters),
    )
