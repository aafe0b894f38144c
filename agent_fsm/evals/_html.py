"""
An eval report as one offline HTML page: the run viewer's stylesheet inlined, no script, every value escaped.

The page opens from disk or a CI artifact with nothing else: the viewer's
``inbox.css`` is read from the package and inlined, and the page carries no
script at all. When runs were saved to a store served by ``agent-fsm view``,
``run_href`` (e.g. ``"http://127.0.0.1:8000/runs/{run_id}"``) links each run to its page.
"""

from __future__ import annotations

from html import escape
from importlib import resources

from agent_fsm.evals._report import CaseReport, EvalReport, RunRecord

__all__ = ["report_html"]

_EXTRA = """
table.eval { border-collapse: collapse; width: 100%; }
table.eval th, table.eval td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
table.eval td.num { font-variant-numeric: tabular-nums; }
details > summary { cursor: pointer; }
"""


def _stylesheet() -> str:
    # Read as data beside the package, not imported: the page needs the look, not the web application.
    return (resources.files("agent_fsm") / "web" / "static" / "inbox.css").read_text(encoding="utf-8")


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _tone(passed: bool) -> str:
    return "tone-ok" if passed else "tone-bad"


def _run_row(run: RunRecord, run_href: str | None) -> str:
    if run.skipped is not None:
        ending = f'<span class="badge tone-idle">{escape(run.skipped)}</span>'
    elif run.error is not None:
        ending = f'<span class="badge tone-bad">error</span> <span class="code">{escape(run.error)}</span>'
    else:
        ending = f'<span class="code">{escape(str(run.stop))} ({escape(str(run.code))})</span>'
    label = f"run {run.repeat + 1}"
    if run_href is not None and run.run_id is not None:
        label = f'<a href="{escape(run_href.replace("{run_id}", run.run_id), quote=True)}">{label}</a>'
    scores = "".join(
        f'<li><span class="badge {_tone(s.passed)}">{escape(s.name)} {_value(s.value)}</span> {escape(s.reason)}</li>'
        for s in run.scores
    )
    verdict = "passed" if run.passed else "failed"
    return (
        f'<tr><td>{label}</td><td><span class="badge {_tone(run.passed)}">{verdict}</span></td><td>{ending}</td>'
        f'<td class="num">{run.turns}</td><td class="num">{run.tokens}</td><td class="num">{run.cost}</td>'
        f"<td><ul>{scores}</ul></td></tr>"
    )


def _case(case: CaseReport, run_href: str | None) -> str:
    low, high = case.interval
    rows = "".join(_run_row(run, run_href) for run in case.runs)
    tone = _tone(case.passed == len(case.runs))
    return (
        f'<section class="card"><details><summary><span class="badge {tone}">{case.passed}/{len(case.runs)}</span> '
        f"<strong>{escape(case.name)}</strong> "
        f'<span class="muted">pass rate {case.pass_rate:.0%}, 95% interval [{low:.2f}, {high:.2f}]</span></summary>'
        '<table class="eval"><tr><th>run</th><th>verdict</th><th>ending</th><th>turns</th><th>tokens</th>'
        f"<th>cost</th><th>scores</th></tr>{rows}</table></details></section>"
    )


def report_html(report: EvalReport, *, run_href: str | None = None) -> str:
    """The whole report as a self-contained HTML page (no script, no external resource)."""
    total = sum(r.passed for r in report.runs)
    summary = (
        f"{total}/{len(report.runs)} runs passed ({report.pass_rate:.0%}); spent {report.spent_turns} turns, "
        f"{report.spent_tokens} tokens, cost {report.spent_cost}"
    )
    stopped = '<p><span class="badge tone-ask">budget spent: runs not started</span></p>' if report.stopped else ""
    cases = "".join(_case(case, run_href) for case in report.cases)
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>eval {escape(report.name)}</title><style>{_stylesheet()}{_EXTRA}</style></head><body>"
        f'<header class="bar"><span class="brand">agent_fsm eval</span><span>{escape(report.name)}</span></header>'
        f'<main><section class="card"><h1>{escape(report.name)}</h1><p>{escape(summary)}</p>{stopped}</section>'
        f"{cases}</main></body></html>\n"
    )
