"""
``agent-fsm lookup`` and ``agent-fsm refine``: run the reference systems' authored cases and reports.

``lookup`` runs one case of the documentation lookup's table (:data:`agent_fsm.examples.doc_lookup.CASES`)
with one of its policies, prints each decision, the answer, its source, the ending and whether the
case's independent outcome held, and with ``--save`` writes the trace. ``refine`` runs the retrieval
controller and its controlled duplicate case and prints (and with ``--output`` saves) the combined
report. Exit codes: 0 the outcome held (``lookup``) or the report was made (``refine``); 1 it did not,
or bad input, in one line; 2 a usage error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from agent_fsm.cli._text import clean

__all__ = ["lookup_command", "refine_command"]


def _echo(text: str, *, err: bool = False) -> None:
    typer.echo(clean(text), err=err)


def _fail(message: str) -> typer.Exit:
    _echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _write_json(path: Path, data: Any) -> None:
    try:
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot write {path}: {exc.strerror or exc}") from None


def _decisions(messages: list[dict[str, Any]]) -> list[str]:
    """Each policy decision of the run, in order: a tool's name, or ``final`` for an answer."""
    names = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls") or ()
        names += [call["function"]["name"] for call in calls] if calls else ["final"]
    return names


def lookup_command(
    case_id: Annotated[
        str | None, typer.Option("--case", help="The case to run (default rollback-direct; --list shows them all).")
    ] = None,
    policy: Annotated[str, typer.Option("--policy", help="The deciding policy (a name in doc_lookup.POLICIES).")] = (
        "scripted"
    ),
    save: Annotated[
        Path | None, typer.Option("--save", help="Write the trace (case, task, policy, ending, run state) as JSON.")
    ] = None,
    list_cases: Annotated[bool, typer.Option("--list", help="List the cases and exit.")] = False,
) -> None:
    """Run one case of the documentation lookup and say whether its independent outcome held."""
    from agent_fsm.examples import doc_lookup

    if list_cases:
        for entry in doc_lookup.CASES:
            _echo(f"{entry['id']}  {entry['family']}  {entry['version']}  {entry['question']}")
        raise typer.Exit(0)
    if policy not in doc_lookup.POLICIES:
        raise typer.BadParameter(f"unknown policy {policy!r}; expected one of {sorted(doc_lookup.POLICIES)}")
    try:
        entry = doc_lookup.case(case_id or doc_lookup.DEFAULT_CASE)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    task = doc_lookup.task_of(entry)
    result, held = doc_lookup.run_case(task.id, policy=policy)
    fields, _ = doc_lookup.FINAL.read(result.answer or "")
    _echo(f"case {task.id} ({task.family}, {task.version}, {task.environment}): {task.question}")
    for turn, name in enumerate(_decisions(result.state.messages), start=1):
        _echo(f"turn {turn}: {name}")
    _echo(f"answer: {fields['answer'] if fields else 'none'}")
    _echo(f"source: {(fields['citation'] or 'none') if fields else 'none'}")
    _echo(f"ending: {result.stop.value} (code {result.code}) | independent outcome: {'held' if held else 'FAILED'}")
    _echo(f"policy: {policy}")
    if save is not None:
        trace = {
            "case": task.id,
            "task": {
                "id": task.id,
                "family": task.family,
                "question": task.question,
                "version": task.version,
                "environment": task.environment,
            },
            "policy": policy,
            "stop": result.stop.value,
            "code": result.code,
            "reason": result.reason,
            "answer": fields,
            "outcome_held": held,
            "state": json.loads(result.state.to_json()),
        }
        _write_json(save, trace)
        _echo(f"trace saved to {save}")
    raise typer.Exit(0 if held else 1)


def _run_lines(title: str, run: dict[str, Any]) -> list[str]:
    return [
        f"{title}: {run['status']} ({run['reason']})",
        f"  queries: {' -> '.join(run['query_history']) or 'none'}",
        f"  read: {', '.join(run['read_sources']) or 'none'}",
    ]


def refine_command(
    question: Annotated[
        str | None, typer.Option("--question", help="The question the controller's rule is chosen from.")
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the whole report as JSON.")] = None,
) -> None:
    """Run the retrieval controller and its controlled duplicate case; print the combined report."""
    from agent_fsm.examples.retrieval import run_report

    try:
        report = run_report() if question is None else run_report(question)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    mode = "no model called" if not report["model_called"] else "a model was called"
    lines = [f"execution mode: {report['execution_mode']} ({mode})", f"corpus: {report['corpus_id']}"]
    lines += _run_lines("normal run", report["controller"])
    lines += _run_lines("controlled duplicate", report["controlled_duplicate_stop"])
    lines.append(report["interpretation"])
    for line in lines:
        _echo(line)
    if output is not None:
        _write_json(output, report)
        _echo(f"report saved to {output}")
