"""The chapter's charts (figures 16.3, 16.4, 16.6): measured from live runs, drawn deterministically, drift-tested."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_fsm.cli import app
from agent_fsm.diagrams.charts import CHART_FILES, CHARTS, ChartsUnavailable, chart_data, render_chart, write_charts
from agent_fsm.examples.compare import compare_rows

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "diagrams"
FIX = "diagrams/ charts are stale: regenerate them with `agent-fsm charts --output diagrams/` and commit the result"

try:
    import matplotlib  # noqa: F401

    HAVE_MATPLOTLIB = True
except ImportError:
    HAVE_MATPLOTLIB = False

needs_matplotlib = pytest.mark.skipif(
    not HAVE_MATPLOTLIB, reason="matplotlib is not installed: pip install -e '.[plots]' (the plots extra; .ci/run does)"
)


def test_the_refund_chart_shows_what_bounded_the_refund():
    """Figure 16.3: the same script moves 9999 cents with no gate and 4999 behind refund_gate, under 5000."""
    data = chart_data()["refund_bound"]
    assert data == {"policy_limit_cents": 5000, "refunded_cents": {"allow_all gate": 9999, "refund_gate": 4999}}


def test_the_token_chart_climbs_linearly_until_the_budget_ends_the_wanderer():
    """Figure 16.4: each turn resends the transcript, about 90 tokens more; the wanderer ends token_limit."""
    data = chart_data()["token_budget"]
    wanderer = data["wanderer"]["prompt_tokens"]
    assert data["wanderer"]["stop"] == "token_limit" and data["max_prompt_tokens"] == 1200
    steps = {b - a for a, b in zip(wanderer, wanderer[1:], strict=False)}
    # the wanderer reuses one call id; from its second call on the engine renames it w~2, w~3 ... (two tokens)
    assert steps <= {87, 88, 89, 90, 91}
    assert wanderer[-1] <= 1200 < wanderer[-1] + 90
    assert len(data["denial run"]["prompt_tokens"]) == 4 and data["denial run"]["stop"] == "answered"


def test_the_cost_chart_is_agent_fsm_compare():
    """Figure 16.6: one bar group per row of the comparison, the plan executor included."""
    rows = chart_data()["pattern_cost"]
    assert [(r["pattern"], r["model_calls"], r["tool_calls"], r["prompt_tokens"]) for r in rows] == [
        (r.pattern, r.model_calls, r.tool_calls, r.prompt_tokens) for r in compare_rows()
    ]
    assert [r["pattern"] for r in rows][-1] == "plan"


def test_committed_chart_data_does_not_drift():
    """diagrams/charts.json is what the runs measure now (no plotting library needed for this one)."""
    assert json.loads((COMMITTED / "charts.json").read_text()) == chart_data(), FIX


@needs_matplotlib
@pytest.mark.parametrize("name", CHARTS)
def test_committed_charts_do_not_drift(name):
    """Each committed SVG equals a fresh rendering, byte for byte."""
    assert (COMMITTED / f"{name}.svg").read_bytes() == render_chart(name, chart_data()), f"{name}.svg: {FIX}"


@needs_matplotlib
def test_a_chart_is_the_same_bytes_every_time_and_carries_no_date():
    """Fixed hash salt, no date, no library version: two renderings are identical."""
    data = chart_data()
    first, second = render_chart("pattern_cost", data), render_chart("pattern_cost", data)
    assert first == second
    assert b"<dc:date>" not in first and b"Matplotlib v" not in first
    assert render_chart("refund_bound", data, "png").startswith(b"\x89PNG")


@needs_matplotlib
def test_the_command_writes_every_chart(tmp_path):
    """`agent-fsm charts --output DIR` writes the SVGs and the data, and names each file."""
    result = CliRunner().invoke(app, ["charts", "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(CHART_FILES)
    assert result.output.split() == [str(tmp_path / name) for name in CHART_FILES]


def test_without_matplotlib_the_command_names_the_extra(tmp_path, monkeypatch):
    """No plotting library: a one-line error naming the plots extra, exit 1, nothing written."""
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ChartsUnavailable, match=r"agent_fsm\[plots\]"):
        write_charts(tmp_path / "charts")
    result = CliRunner().invoke(app, ["charts", "--output", str(tmp_path / "charts")])
    assert result.exit_code == 1 and "plots extra" in result.output
    assert not (tmp_path / "charts").exists()


def test_an_unknown_chart_is_refused():
    """Only the three charts exist."""
    with pytest.raises((KeyError, ChartsUnavailable)):
        render_chart("pie", {})
