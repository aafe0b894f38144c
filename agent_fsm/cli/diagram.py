"""
The ``agent-fsm diagram`` command: draw a machine, or the path one saved run took through it.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from agent_fsm.cli._text import clean
from agent_fsm.diagrams.catalog import machines, write_all
from agent_fsm.diagrams.dot import GraphvizMissing, render, to_dot
from agent_fsm.diagrams.mermaid import to_mermaid
from agent_fsm.diagrams.path import TRACE_KEY, TraceError, load_trace, path_of
from agent_fsm.diagrams.sequence import sequence_diagram
from agent_fsm.engine.machine import RUN_MACHINE, MachineSpec

__all__ = ["Format", "diagram_command"]


class Format(str, enum.Enum):
    """Output formats of ``agent-fsm diagram``."""

    mermaid = "mermaid"
    dot = "dot"
    svg = "svg"
    png = "png"


_SUFFIX = {Format.mermaid: "mmd", Format.dot: "dot", Format.svg: "svg", Format.png: "png"}


def _fail(message: str) -> typer.Exit:
    typer.echo(clean(f"error: {message}"), err=True)
    return typer.Exit(1)


def diagram_command(
    machine: Annotated[
        str | None,
        typer.Option("--machine", "-m", help="Machine to draw, by catalog name (default: run).", show_default=False),
    ] = None,
    format: Annotated[
        Format, typer.Option("--format", "-f", help="mermaid or dot (text), svg or png (drawn by Graphviz's dot).")
    ] = Format.mermaid,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="File to write (a folder takes <machine>.<ext>); with --all, the folder. Default: standard output.",
            show_default=False,
        ),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            "-t",
            help=f"Saved run (RunState.to_json(), or a JSON object with it under {TRACE_KEY!r}): draw its path.",
            show_default=False,
        ),
    ] = None,
    sequence: Annotated[
        bool, typer.Option("--sequence", help="With --trace: draw the run's transcript as a Mermaid sequence diagram.")
    ] = False,
    all_: Annotated[
        bool, typer.Option("--all", help="Write .mmd, .dot and .svg of every catalog machine into --output.")
    ] = False,
) -> None:
    """
    Draw a machine from its live declaration, or the path one saved run took through it.

    agent-fsm diagram  prints the run machine as Mermaid.

    agent-fsm diagram -f svg -o run.svg  draws it with Graphviz.

    agent-fsm diagram --trace run.json  highlights the path a saved run took.

    agent-fsm diagram --trace run.json --sequence  draws that run's transcript.

    agent-fsm diagram --all --output diagrams/  regenerates the committed diagrams.

    Exit status: 0 done, 1 failed (the message says why), 2 usage error.
    """
    if all_:
        if output is None:
            raise typer.BadParameter("--all writes files: give the folder with --output", param_hint="--all")
        if trace is not None or machine is not None or sequence or format is not Format.mermaid:
            raise typer.BadParameter("--all takes only --output", param_hint="--all")
    if sequence and trace is None:
        raise typer.BadParameter("a sequence diagram is drawn from a run: give --trace", param_hint="--sequence")
    if sequence and format is not Format.mermaid:
        raise typer.BadParameter("sequence diagrams are Mermaid only", param_hint="--format")
    if trace is not None and machine not in (None, RUN_MACHINE.name):
        raise typer.BadParameter(
            f"a saved run is a path through the {RUN_MACHINE.name!r} machine", param_hint="--machine"
        )
    if format is Format.png and output is None:
        raise typer.BadParameter("PNG is binary: give a file with --output", param_hint="--format")
    name = machine or RUN_MACHINE.name
    if name not in machines():
        raise _fail(f"unknown machine {name!r} (known: {', '.join(machines())})")
    try:
        if all_:
            assert output is not None
            for file in write_all(output):
                typer.echo(str(file))
            return
        data = _draw(machines()[name], format, trace, sequence)
    except (TraceError, GraphvizMissing) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot write {exc.filename}: {exc.strerror}" if exc.filename else str(exc)) from None
    if output is None:
        typer.echo(clean(data.decode()), nl=False)
        return
    if output.is_dir():
        output = output / f"{'sequence' if sequence else name}.{_SUFFIX[format]}"
    try:
        output.write_bytes(data)
    except OSError as exc:
        raise _fail(f"cannot write {output}: {exc.strerror}") from None


def _draw(machine: MachineSpec, format: Format, trace: Path | None, sequence: bool) -> bytes:
    path = None
    if trace is not None:
        try:
            text = trace.read_text(encoding="utf-8")
        except OSError as exc:
            raise TraceError(f"cannot read trace {trace}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise TraceError(f"trace {trace} is not UTF-8 text: {exc.reason}") from None
        state = load_trace(text)
        if sequence:
            # A trace is outside text: a lone surrogate in it is drawn as its escape.
            return clean(sequence_diagram(state), "utf-8").encode()
        path = path_of(state)
    if format is Format.mermaid:
        return to_mermaid(machine, path=path).encode()
    if format is Format.dot:
        return to_dot(machine, path=path).encode()
    return render(machine, format.value, path=path)
