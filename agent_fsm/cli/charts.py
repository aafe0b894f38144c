"""
The ``agent-fsm charts`` command: measure the chapter's runs and draw their charts into a folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["charts_command"]


def charts_command(
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Folder to write charts.json and the SVG charts into.")
    ] = Path("diagrams"),
) -> None:
    """Draw the refund bound, token budget and pattern cost charts from live runs (needs the plots extra)."""
    from agent_fsm.diagrams.charts import ChartsUnavailable, write_charts

    try:
        written = write_charts(output)
    except ChartsUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    for path in written:
        typer.echo(str(path))
