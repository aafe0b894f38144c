"""The reference eval: the support desk over thirteen cases, offline from cassettes, reported and compared."""

from __future__ import annotations

import json
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_fsm.cli import app
from agent_fsm.evals import EvalBudget, EvalReport, compare_reports, load_dataset, report_html, run_eval
from tests.eval_worlds import stricter_desk

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "evals" / "support_desk" / "desk.eval.toml"


@pytest.fixture(scope="module")
def baseline() -> EvalReport:
    """The reference eval, replayed from its cassettes under a shared money budget."""
    return run_eval(load_dataset(DATASET), budget=EvalBudget(max_cost=Decimal("0.50")))


def test_the_reference_eval_passes_offline_from_cassettes(baseline):
    """At least ten cases, each replayed twice from its cassette: every run passes and money stays in budget."""
    assert len(baseline.cases) >= 10
    assert all(case.pass_rate == 1.0 for case in baseline.cases), baseline.table()
    assert baseline.spent_cost == Decimal("0.2029300") <= Decimal("0.50")
    assert not baseline.stopped


def test_a_tight_money_budget_stops_the_reference_eval_typed():
    """Under 0.12 for the whole eval, runs start only with what is left and the rest are budget_spent."""
    report = run_eval(load_dataset(DATASET), budget=EvalBudget(max_cost=Decimal("0.12")))
    assert report.spent_cost == sum(r.cost for r in report.runs) <= Decimal("0.12")
    assert report.stopped and any(r.skipped == "budget_spent" for r in report.runs)


def test_the_report_in_three_forms(baseline, tmp_path):
    """A terminal table, JSON that reads back the same, and an offline HTML page with no script."""
    table = baseline.table()
    assert "support-desk/happy-path" in table and "26/26 runs passed" in table
    path = tmp_path / "report.json"
    baseline.save(path)
    assert EvalReport.load(path) == baseline
    page = report_html(baseline, run_href="http://127.0.0.1:8000/runs/{run_id}")

    seen: list[str] = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag, attrs):
            seen.append(tag)

    Tags().feed(page)
    assert "table" in seen and "script" not in seen and "link" not in seen  # nothing to fetch, nothing to run
    assert "--ok-bg" in page  # the viewer's stylesheet, inlined
    first = baseline.cases[0].runs[0].run_id
    assert f'href="http://127.0.0.1:8000/runs/{first}"' in page


def test_the_html_page_escapes_what_runs_said(baseline):
    """A reason carrying markup is shown as text, never as markup."""
    import attrs

    from agent_fsm.evals import Score

    run = attrs.evolve(baseline.cases[0].runs[0], scores=(Score("x", 0.0, False, "<script>alert(1)</script>"),))
    case = attrs.evolve(baseline.cases[0], runs=(run,))
    page = report_html(attrs.evolve(baseline, cases=(case,)))
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_planted_regression_is_flagged(baseline):
    """A stricter refund gate breaks the cases that refund 4999 cents: the comparison names them, with intervals."""
    regressed = run_eval(load_dataset(DATASET), stricter_desk)
    comparison = compare_reports(baseline, regressed, threshold=0.2)
    names = {c.name for c in comparison.regressions}
    assert {"support-desk/happy-path", "support-desk/react", "support-desk/plan-replan"} <= names
    assert "support-desk/wanderer" not in names  # a case that never proposes a refund is unchanged
    happy = next(c for c in comparison.changes if c.name == "support-desk/happy-path")
    assert (happy.before, happy.after, happy.delta) == (1.0, 0.0, -1.0)
    assert happy.after_interval == pytest.approx((0.0, 0.6576), abs=1e-4)
    assert "regressed  support-desk/happy-path: 100% [0.34, 1.00] -> 0% [0.00, 0.66] (-100%)" in comparison.text()
    assert compare_reports(regressed, baseline).improvements  # and back again


def test_the_command_line_exits_1_on_a_regression(tmp_path):
    """agent-fsm eval writes JSON and HTML; --against a report exits 0 when nothing fell, 1 on a planted regression."""
    runner = CliRunner()
    base = tmp_path / "base.json"
    page = tmp_path / "base.html"
    first = runner.invoke(app, ["eval", str(DATASET), "--repeat", "1", "--json", str(base), "--html", str(page)])
    assert first.exit_code == 0, first.output
    assert json.loads(base.read_text())["format"] == "agent_fsm.eval-report/1" and page.read_text().startswith(
        "<!doctype"
    )
    same = runner.invoke(app, ["eval", str(DATASET), "--repeat", "1", "--against", str(base)])
    assert same.exit_code == 0, same.output
    assert "0 regressed, 0 improved" in same.output
    worse = runner.invoke(
        app,
        ["eval", str(DATASET), "--repeat", "1", "--against", str(base), "--world", "tests.eval_worlds:stricter_desk",
         "--allow-module", "tests.eval_worlds"],
    )  # fmt: skip
    assert worse.exit_code == 1, worse.output
    assert "regressed  support-desk/happy-path" in worse.output


def test_the_command_line_reports_bad_input_in_one_line(tmp_path):
    """A missing dataset or a report that is not one: exit 1 with one line, no traceback."""
    runner = CliRunner()
    missing = runner.invoke(app, ["eval", str(tmp_path / "none.toml")])
    assert missing.exit_code == 1 and "no such dataset file" in missing.output
    (tmp_path / "r.json").write_text("{}")
    wrong = runner.invoke(app, ["eval", str(DATASET), "--against", str(tmp_path / "r.json")])
    assert wrong.exit_code == 1 and "not an eval report" in wrong.output
    assert "Traceback" not in missing.output + wrong.output


def test_the_command_line_keeps_runs_in_a_store_and_links_them(tmp_path):
    """--store keeps every run on disk and --run-href links each in the HTML page to its page."""
    from agent_fsm.store import SqliteStore

    runner = CliRunner()
    page = tmp_path / "eval.html"
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    href = "http://127.0.0.1:8000/runs/{run_id}"
    done = runner.invoke(
        app, ["eval", str(DATASET), "--repeat", "1", "--store", url, "--html", str(page), "--run-href", href]
    )
    assert done.exit_code == 0, done.output
    store = SqliteStore(tmp_path / "runs.db")
    try:
        ids = [summary.run_id for summary in store.runs()]
    finally:
        store.close()
    assert len(ids) == 13
    assert all(f'href="http://127.0.0.1:8000/runs/{run_id}"' in page.read_text() for run_id in ids)
    bad = runner.invoke(app, ["eval", str(DATASET), "--run-href", "http://x/runs/"])
    assert bad.exit_code == 2 and "{run_id}" in bad.output
