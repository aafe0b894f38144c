"""
The chapter's charts, measured from live runs: what bounded the refund, the token budget, the patterns' cost.

Three figures, each drawn from runs made when the command runs, never typed in:

* ``refund_bound``: cents actually refunded by the same over-reaching
  script with no gate (``allow_all``) and behind ``refund_gate``, against
  the 5000-cent policy line;
* ``token_budget``: estimated prompt tokens per model call for the
  wanderer (it ends ``token_limit``) and for the denial run (it answers),
  against ``max_prompt_tokens``;
* ``pattern_cost``: model and tool calls, and estimated prompt tokens, of
  every row of ``agent-fsm compare``.

:func:`chart_data` measures (no plotting library needed); :func:`write_charts`
draws ``<name>.svg`` with matplotlib, the ``plots`` extra, on the Agg canvas
with a fixed style and no dates or random ids in the SVG, so the committed
files can be compared byte for byte by the drift test.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, cast

from agent_fsm.engine import Limits, allow_all
from agent_fsm.examples.compare import compare_rows
from agent_fsm.examples.demo import TASK, overreaching_model
from agent_fsm.examples.support_desk import AUTO_REFUND_LIMIT_CENTS, make_support_desk, refund_gate, support_agent

__all__ = ["CHARTS", "CHART_FILES", "ChartsUnavailable", "chart_data", "render_chart", "write_charts"]

CHARTS = ("refund_bound", "token_budget", "pattern_cost")
"""The charts, in the order they are written."""

CHART_FILES = (*(f"{name}.svg" for name in CHARTS), "charts.json")
"""What :func:`write_charts` puts in ``diagrams/`` beside the state diagrams (its own drift test covers them)."""

WANDERER_LIMITS = Limits(max_turns=40, max_prompt_tokens=1200)
"""The budgets of the wanderer's run: a turn budget it never reaches, and the token budget that stops it."""

_BLUE, _RED, _OCHRE, _GREEN, _GREY = "#2a7f9e", "#b13f3f", "#b7791f", "#557a3c", "#555555"
_STYLE: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "svg.fonttype": "none",  # text stays text: smaller files, and no glyph outlines to differ between builds
    "svg.hashsalt": "agent-fsm",  # element ids from a fixed salt, not a random one
    "path.simplify": False,
}


class ChartsUnavailable(RuntimeError):
    """matplotlib is not installed: ``pip install 'agent_fsm[plots]'``."""


def _wanderer_run() -> Any:
    from agent_fsm.examples.support_desk import _wanderer

    return support_agent(make_support_desk(), _wanderer(), limits=WANDERER_LIMITS).run("Investigate order A-17.")


def chart_data() -> dict[str, Any]:
    """Run the scripts behind the three charts and return what each one plots (plain JSON data)."""
    refunded: dict[str, int] = {}
    denial_log: list[int] = []
    for label, gate in (("allow_all gate", allow_all), ("refund_gate", refund_gate)):
        desk = make_support_desk()
        result = support_agent(desk, overreaching_model(), gate=gate).run(TASK)
        refunded[label] = sum(e["refunded_cents"] for e in desk.effects)
        if gate is refund_gate:
            denial_log = list(result.state.prompt_token_log)
    wanderer = _wanderer_run()
    return {
        "refund_bound": {"policy_limit_cents": AUTO_REFUND_LIMIT_CENTS, "refunded_cents": refunded},
        "token_budget": {
            "max_prompt_tokens": WANDERER_LIMITS.max_prompt_tokens,
            "wanderer": {"stop": wanderer.stop.value, "prompt_tokens": list(wanderer.state.prompt_token_log)},
            "denial run": {"stop": "answered", "prompt_tokens": denial_log},
        },
        "pattern_cost": [
            {
                "pattern": r.pattern,
                "model_calls": r.model_calls,
                "tool_calls": r.tool_calls,
                "prompt_tokens": r.prompt_tokens,
                "ending": r.ending,
            }
            for r in compare_rows()
        ],
    }


def _refund_bound(fig: Any, data: dict[str, Any]) -> None:
    ax = fig.subplots()
    labels = list(data["refunded_cents"])
    amounts = [data["refunded_cents"][k] for k in labels]
    limit = data["policy_limit_cents"]
    bars = ax.bar(labels, amounts, width=0.5, color=[_RED, _BLUE])
    ax.axhline(limit, linestyle="--", color=_GREY, linewidth=1)
    ax.text(0.5, limit + 150, f"policy limit ({limit} cents)", fontsize=8, ha="center", color=_GREY)
    for bar, amount in zip(bars, amounts, strict=True):
        ax.text(bar.get_x() + bar.get_width() / 2, amount + 150, str(amount), ha="center", fontsize=9)
    ax.set_ylim(0, max(amounts) * 1.15)
    ax.set_ylabel("cents actually refunded")
    ax.set_title("Same over-reaching script: what bounded the refund?")


def _token_budget(fig: Any, data: dict[str, Any]) -> None:
    ax = fig.subplots()
    for name, marker, size, color, width in (("wanderer", "o", 4, _RED, 1.2), ("denial run", "s", 8, _BLUE, 2.5)):
        run_data = data[name]
        log = run_data["prompt_tokens"]
        ax.plot(
            range(1, len(log) + 1),
            log,
            marker=marker,
            markersize=size,
            linewidth=width,
            color=color,
            label=f"{name}: {len(log)} calls, ends {run_data['stop']}",
            zorder=3 if name == "denial run" else 2,
        )
    wanderer = data["wanderer"]["prompt_tokens"]
    ax.annotate(
        "next prompt would exceed the budget",
        xy=(len(wanderer), wanderer[-1]),
        xytext=(len(wanderer) - 3.6, wanderer[-1] - 520),
        fontsize=8,
        color=_GREY,
        arrowprops={"arrowstyle": "->", "color": _GREY},
    )
    budget = data["max_prompt_tokens"]
    ax.axhline(budget, linestyle="--", color=_GREY, linewidth=1)
    ax.text(1, budget + 25, f"max_prompt_tokens = {budget}", fontsize=8, color=_GREY)
    ax.set_ylim(0, budget * 1.12)
    ax.set_xlabel("model call number")
    ax.set_ylabel("estimated prompt tokens")
    ax.set_title("The transcript is resent each turn: the token budget ends the wanderer")
    ax.legend(loc="lower right")


def _pattern_cost(fig: Any, rows: list[dict[str, Any]]) -> None:
    from matplotlib.ticker import MaxNLocator

    calls_ax, tokens_ax = fig.subplots(1, 2)
    names = [r["pattern"] for r in rows]
    x = list(range(len(names)))
    calls_ax.bar([i - 0.18 for i in x], [r["model_calls"] for r in rows], width=0.36, color=_BLUE, label="model calls")
    calls_ax.bar([i + 0.18 for i in x], [r["tool_calls"] for r in rows], width=0.36, color=_OCHRE, label="tool calls")
    calls_ax.set_ylabel("calls")
    calls_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    calls_ax.legend(loc="upper left")
    bars = tokens_ax.bar(x, [r["prompt_tokens"] for r in rows], width=0.5, color=_GREEN)
    for bar, row in zip(bars, rows, strict=True):
        tokens_ax.text(
            bar.get_x() + bar.get_width() / 2, bar.get_height() + 20, str(row["prompt_tokens"]), ha="center", fontsize=7
        )
    tokens_ax.set_ylabel("estimated prompt tokens")
    for ax in (calls_ax, tokens_ax):
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=30, ha="right")
    fig.suptitle("The same refund task under each control policy", fontsize=10)


_DRAW: dict[str, tuple[Any, tuple[float, float]]] = {
    "refund_bound": (_refund_bound, (5.8, 3.4)),
    "token_budget": (_token_budget, (6.4, 3.6)),
    "pattern_cost": (_pattern_cost, (8.0, 3.6)),
}


def render_chart(name: str, data: dict[str, Any], fmt: str = "svg") -> bytes:
    """
    One chart as ``fmt`` bytes (``svg`` for the committed files, ``png`` to look at).

    Raises:
        ChartsUnavailable: matplotlib (the ``plots`` extra) is not installed.
        KeyError: ``name`` is not one of :data:`CHARTS`.
    """
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ChartsUnavailable(
            "drawing the charts needs matplotlib: pip install 'agent_fsm[plots]' (the plots extra)"
        ) from exc
    if name not in _DRAW:
        raise KeyError(f"no chart {name!r}; expected one of {list(CHARTS)}")
    draw, size = _DRAW[name]
    with matplotlib.rc_context(cast(Any, _STYLE)):
        fig = Figure(figsize=size, dpi=100)
        FigureCanvasAgg(fig)
        draw(fig, data[name])
        fig.tight_layout()
        buffer = io.BytesIO()
        metadata = {"Date": None, "Creator": "agent-fsm charts"} if fmt == "svg" else {"Software": "agent-fsm charts"}
        fig.savefig(buffer, format=fmt, metadata=metadata)
    return buffer.getvalue()


def write_charts(folder: Path) -> list[Path]:
    """
    Measure the runs and write ``charts.json`` and ``<chart>.svg`` for every chart into ``folder``.

    Raises:
        ChartsUnavailable: matplotlib is not installed (nothing is written then).
    """
    data = chart_data()
    contents = {folder / f"{name}.svg": render_chart(name, data) for name in CHARTS}
    contents[folder / "charts.json"] = (json.dumps(data, indent=2) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    for path, body in contents.items():
        path.write_bytes(body)
    return list(contents)
