"""
``agent-fsm view TRACE.json -o run.html``: one saved run as a single self-contained HTML page.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agent_fsm.cli._text import clean
from agent_fsm.diagrams.path import TRACE_KEY, TraceError, load_trace

__all__ = ["view_command"]


def _fail(message: str) -> typer.Exit:
    typer.echo(clean(f"error: {message}"), err=True)
    return typer.Exit(1)


def view_command(
    trace: Annotated[
        Path,
        typer.Argument(
            help=f"Saved run: RunState.to_json() (agent-fsm runs export), or JSON with it under {TRACE_KEY!r}.",
            show_default=False,
        ),
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.", show_default=False)],
) -> None:
    """
    Write one saved run as a self-contained HTML page: its path on the state diagram, the transcript
    as a timeline, the budgets spent and the ending. Runs nested in its calls (agents run as tools,
    handoffs) are shown inside the calls that ran them, the call a nested pause waits on marked.
    The page needs no network and runs no script.

    Exit status: 0 written, 1 failed (the message says why), 2 usage error.
    """
    try:
        from agent_fsm.web.pages import render_view
    except ImportError as exc:
        raise _fail(f"the viewer needs the web extra (pip install 'agent_fsm[web]'): {exc}") from None
    try:
        state = load_trace(trace.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _fail(f"cannot read trace {trace}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise _fail(f"trace {trace} is not UTF-8 text: {exc.reason}") from None
    except TraceError as exc:
        raise _fail(f"{trace}: {exc}") from None
    try:
        output.write_text(render_view(state), encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot write {output}: {exc.strerror}") from None
    typer.echo(str(output))
