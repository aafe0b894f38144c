"""``agent-fsm view TRACE.json -o run.html``: one self-contained page per saved run, hostile text inert."""

from __future__ import annotations

import html
import re
from pathlib import Path

import markupsafe
import pytest
from typer.testing import CliRunner

from agent_fsm import Limits, RunState, ScriptedModel, ToolSpec, allow_all, answer_message, run, tool_call_message
from agent_fsm.cli import app
from agent_fsm.engine import RUN_MACHINE
from agent_fsm.web import VIEW_POLICY, budget_chart, render_view, timeline_of
from tests.web_world import ANSWER, IMG, SCRIPT, TEXTAREA, THOUGHTS

runner = CliRunner()


def _hostile_run() -> RunState:
    tools = {"echo": ToolSpec("Echo a note.", {"note": str}, lambda note: {"echoed": note})}
    model = ScriptedModel(
        [{**tool_call_message("c1", "echo", {"note": TEXTAREA + SCRIPT}), "content": THOUGHTS}, answer_message(ANSWER)]
    )
    return run(f"Echo {IMG}", model, tools, gate=allow_all, limits=Limits(max_turns=5, max_prompt_tokens=3000)).state


def test_view_writes_one_page_that_needs_nothing_else(tmp_path: Path, graphviz_dot: str) -> None:
    """The page holds the diagram, the timeline, the budgets and the ending, and loads nothing from anywhere."""
    trace = tmp_path / "run.json"
    trace.write_text(_hostile_run().to_json())
    result = runner.invoke(app, ["view", str(trace), "-o", str(tmp_path / "run.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "run.html").read_text()
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert policy is not None and html.unescape(policy.group(1)) == VIEW_POLICY
    assert VIEW_POLICY.startswith("default-src 'none';") and "script-src" not in VIEW_POLICY  # no script at all
    assert re.search(r"<(script|link|iframe|img)\b", page) is None
    assert re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page) is None  # no resource fetched
    for state in RUN_MACHINE.states:
        assert f">{state.name}</text>" in page
    for section in ('id="diagram"', 'id="timeline"', 'id="budgets"', 'id="effects"'):
        assert section in page
    assert "Proposing → Executing → Ready → Proposing → Answered" in page


def test_hostile_text_is_escaped_in_the_saved_page(tmp_path: Path) -> None:
    """Script, handlers and a textarea break in thoughts, arguments, observation and answer appear only escaped."""
    page = render_view(_hostile_run())
    for payload in (SCRIPT, IMG, TEXTAREA, ANSWER):
        assert payload not in page
        assert str(markupsafe.escape(payload)) in page


def test_the_timeline_follows_the_run() -> None:
    """Turns, proposals, verdicts, observations and the answer, in order."""
    line = timeline_of(_hostile_run())
    assert [t.number for t in line.turns] == [1, 2]
    [call] = line.turns[0].calls
    assert (call.name, call.verdict, call.observation_kind) == ("echo", "allowed", "result")
    assert line.turns[0].thoughts == THOUGHTS and line.answer == ANSWER and line.stop == "answered"


def test_the_budget_chart_measures_against_the_saved_limits() -> None:
    """One bar per prompt, scaled below the ceiling, and meters of calls and attempts against their limits."""
    state = _hostile_run()
    chart = budget_chart(state)
    assert [b.tokens for b in chart.bars] == state.prompt_token_log and chart.ceiling == 3000
    assert all(chart.ceiling_y < b.y < chart.plot_bottom for b in chart.bars)
    assert [(m.label, m.used, m.limit) for m in chart.meters] == [("model calls", 2, 5), ("tool attempts", 1, None)]


@pytest.mark.parametrize(("content", "said"), [("{not json", "not JSON"), ("[]", "saved run state")])
def test_view_says_why_a_trace_cannot_be_read(tmp_path: Path, content: str, said: str) -> None:
    """A file that is not a saved run exits 1 with the reason, and writes nothing."""
    trace = tmp_path / "bad.json"
    trace.write_text(content)
    result = runner.invoke(app, ["view", str(trace), "-o", str(tmp_path / "run.html")])
    assert result.exit_code == 1 and said in result.stderr and not (tmp_path / "run.html").exists()


@pytest.mark.parametrize("limits", [Limits(max_turns=0), Limits(max_prompt_tokens=1), Limits(max_seconds=1e-6)])
def test_the_ending_reason_is_the_drivers(limits: Limits) -> None:
    """The page words a budget ending as the driver's own result does."""
    result = run("Say hi.", ScriptedModel([answer_message("hi")]), {}, gate=allow_all, limits=limits)
    assert result.stop.value != "answered" and timeline_of(result.state).reason == result.reason
