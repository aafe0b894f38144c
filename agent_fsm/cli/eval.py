"""
``agent-fsm eval``: score an agent over a dataset, print the table, save JSON and HTML, compare with a past report.

Exit codes: 0 the eval ran (and, with ``--against``, no case regressed past
``--threshold``); 1 a case regressed, or the dataset, the world or the
report is missing or malformed (one line, no traceback); 2 a usage error.
The world is ``--world MODULE:NAME`` (else the dataset's ``world``), imported
only from ``agent_fsm.examples``, a package given with ``--allow-module`` or
one listed under ``[tool.agent_fsm] spec-modules`` in ``pyproject.toml``.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated

import typer

from agent_fsm.cli.run import _allowed, _echo, _fail
from agent_fsm.cli.runs import open_url
from agent_fsm.evals import EvalBudget, EvalReport, compare_reports, load_dataset, report_html, run_eval
from agent_fsm.evals import world_from_reference as _world
from agent_fsm.scenarios import SpecFormatError

__all__ = ["eval_command"]


def _money(text: str | None) -> Decimal | None:
    if text is None:
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        raise typer.BadParameter(f"{text!r} is not a decimal amount", param_hint="--max-cost") from None


def eval_command(
    dataset: Annotated[Path, typer.Argument(help="A dataset file (TOML: name, world, [[case]] tables).")],
    world: Annotated[
        str | None, typer.Option("--world", help="MODULE:NAME of the function building a fresh world per run.")
    ] = None,
    against: Annotated[
        Path | None, typer.Option("--against", help="A saved report (JSON) to compare with; exit 1 on a regression.")
    ] = None,
    threshold: Annotated[
        float, typer.Option("--threshold", help="How far a pass rate may fall before it counts as a regression.")
    ] = 0.0,
    repeat: Annotated[int | None, typer.Option("--repeat", help="Runs per case (default: dataset's).", min=1)] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Runs in flight at once.", min=1)] = 4,
    seed: Annotated[int, typer.Option("--seed", help="Added to each repeat's index for seeded models.")] = 0,
    max_turns: Annotated[int | None, typer.Option("--max-turns", help="Model calls for the whole eval.", min=0)] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="Tokens for the whole eval.", min=0)] = None,
    max_cost: Annotated[str | None, typer.Option("--max-cost", help='Money for the whole eval, e.g. "0.50".')] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report as JSON here.")] = None,
    html_out: Annotated[Path | None, typer.Option("--html", help="Write an offline HTML page here.")] = None,
    allow_module: Annotated[
        list[str] | None,
        typer.Option("--allow-module", help="A package whose worlds the dataset may name (repeatable)."),
    ] = None,
    store: Annotated[
        str | None, typer.Option("--store", help="Keep every run: sqlite:///PATH or postgresql://USER@HOST:PORT/DB.")
    ] = None,
    run_href: Annotated[
        str | None,
        typer.Option("--run-href", help='Link each run of the HTML page, e.g. "http://127.0.0.1:8000/runs/{run_id}".'),
    ] = None,
) -> None:
    """Score an agent over a dataset: a table of pass rates with intervals; JSON, HTML; compare with a past report."""
    if not 0.0 <= threshold <= 1.0:
        raise typer.BadParameter("a pass-rate change from 0 to 1", param_hint="--threshold")
    budget = EvalBudget(max_turns=max_turns, max_tokens=max_tokens, max_cost=_money(max_cost))
    if run_href is not None and "{run_id}" not in run_href:
        raise typer.BadParameter("the link needs {run_id} where the run's id goes", param_hint="--run-href")
    allowed = _allowed(dataset, allow_module or ())
    kept = open_url(store, create=True) if store is not None else None
    try:
        baseline = EvalReport.load(against) if against is not None else None
        loaded = load_dataset(dataset)
        reference = world if world is not None else loaded.world
        if reference is None:
            raise _fail(f"{dataset}: the dataset names no world; give --world MODULE:NAME")
        report = run_eval(
            loaded,
            _world(reference, allowed),
            repeat=repeat,
            budget=budget,
            concurrency=concurrency,
            seed=seed,
            store=kept,
        )
    except (SpecFormatError, ValueError) as exc:
        raise _fail(str(exc)) from None
    finally:
        if kept is not None:
            kept.close()
    _echo(report.table())
    if json_out is not None:
        report.save(json_out)
        _echo(f"report saved to {json_out}")
    if html_out is not None:
        html_out.write_text(report_html(report, run_href=run_href), encoding="utf-8")
        _echo(f"page saved to {html_out}")
    if baseline is None:
        raise typer.Exit(0)
    comparison = compare_reports(baseline, report, threshold=threshold)
    _echo("")
    _echo(comparison.text())
    raise typer.Exit(1 if comparison.regressions else 0)
