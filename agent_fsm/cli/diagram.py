"""
The ``agent-fsm diagram`` command: draw a machine, or the path one saved run took through it.
"""

from __future__ import annotations

import enum
import importlib
import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from agent_fsm.cli._text import clean
from agent_fsm.diagrams.catalog import machines
from agent_fsm.diagrams.composition import (
    composition_dot,
    composition_mermaid,
    drawn,
    render_composition,
    runs_dot,
    runs_mermaid,
)
from agent_fsm.diagrams.dot import DEFAULT_DIRECTION, Direction, GraphvizMissing, render, to_dot
from agent_fsm.diagrams.folder import write_all
from agent_fsm.diagrams.labels import agent_title
from agent_fsm.diagrams.mermaid import to_mermaid
from agent_fsm.diagrams.path import TRACE_KEY, RunPath, TraceError, load_trace, path_of, path_on_agent
from agent_fsm.diagrams.sequence import sequence_diagram
from agent_fsm.engine import RUN_MACHINE, Agent, MachineSpec, Nested, RunState

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


class Layout(str, enum.Enum):
    """Layout directions: left to right, top to bottom, and their reverses."""

    LR = "LR"
    TB = "TB"
    RL = "RL"
    BT = "BT"


def _size(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        width, height = (float(part) for part in text.split(","))
    except ValueError:
        raise typer.BadParameter(f"expected WIDTH,HEIGHT in inches such as 12,8; got {text!r}") from None
    if not (0 < width < 1000 and 0 < height < 1000):
        raise typer.BadParameter(f"width and height must be positive inches below 1000; got {text!r}")
    return width, height


def load_machine(reference: str) -> MachineSpec:
    """
    A catalog machine by name, or any :class:`MachineSpec` named ``module:attribute``.

    The working directory is importable, so a project's own machines can be named from its root.

    Raises:
        typer.Exit: the name is unknown, the module is missing, or the attribute is not a MachineSpec.
    """
    if ":" not in reference:
        if reference not in machines():
            raise _fail(f"unknown machine {reference!r} (known: {', '.join(machines())}; or give module:attribute)")
        return machines()[reference]
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise _fail(f"expected module:attribute such as bookings.machines:BOOKING_MACHINE, got {reference!r}")
    if str(Path.cwd()) not in sys.path:
        sys.path.append(str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise _fail(f"cannot import {module_name!r}: {exc}") from None
    found = getattr(module, attribute, None)
    if not isinstance(found, MachineSpec):
        what = "nothing" if found is None else f"a {type(found).__name__}"
        raise _fail(f"{reference} is {what}, expected an agent_fsm MachineSpec")
    return found


def diagram_command(
    machine: Annotated[
        str | None,
        typer.Option(
            "--machine",
            "-m",
            help="Machine to draw: a catalog name (default: run), or any MachineSpec as module:attribute.",
            show_default=False,
        ),
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
    direction: Annotated[
        Layout | None,
        typer.Option(
            "--direction",
            "-d",
            help=f"Layout: LR (left to right), TB, RL or BT (default: {DEFAULT_DIRECTION} for dot/svg/png, "
            "Mermaid's own for mermaid).",
            show_default=False,
        ),
    ] = None,
    size: Annotated[
        str | None,
        typer.Option(
            "--size",
            help="WIDTH,HEIGHT in inches: scale a larger dot/svg/png drawing down to fit (96 dpi).",
            show_default=False,
        ),
    ] = None,
    world: Annotated[
        str | None,
        typer.Option(
            "--world",
            help="MODULE:NAME of an Agent (or a function returning one): draw its machine as configured, with "
            "the agents it nests (composite states, DOT clusters); with --trace, the run's path on it.",
            show_default=False,
        ),
    ] = None,
    full: Annotated[
        bool,
        typer.Option("--full", help="With --world: draw the whole run machine in each box, not the agent's own."),
    ] = False,
) -> None:
    """
    Draw a machine from its live declaration, the path one saved run took through it, or an agent's composition.

    agent-fsm diagram  prints the run machine as Mermaid.

    agent-fsm diagram -f svg -o run.svg  draws it with Graphviz.

    agent-fsm diagram --trace run.json  highlights the path a saved run took.

    agent-fsm diagram --trace run.json --sequence  draws that run's transcript.

    agent-fsm diagram -m bookings.machines:BOOKING -f png -o booking.png  draws your own MachineSpec.

    agent-fsm diagram --all --output diagrams/  regenerates the committed diagrams.

    agent-fsm diagram --world app.agents:triage  draws an agent's machine as configured, with the agents it nests.

    agent-fsm diagram --world app.agents:triage --full  draws the whole run machine for each instead.

    agent-fsm diagram --world app.agents:triage --trace run.json  draws a saved run's path on it (nested runs too).

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
    if all_ and (direction is not None or size is not None):
        raise typer.BadParameter("--all draws the committed diagrams with the defaults", param_hint="--all")
    fitted = _size(size)
    if full and world is None:
        raise typer.BadParameter(
            "--full is for --world (without it the whole run machine is drawn)", param_hint="--full"
        )
    if world is not None:
        if machine is not None or all_:
            raise typer.BadParameter("--world draws an agent's machines: it takes no --machine or --all")
        layout = direction.value if direction is not None else None
        _draw_world(world, format, output, layout, fitted, full=full, trace=trace, sequence=sequence)
        return
    if trace is not None and machine not in (None, RUN_MACHINE.name):
        raise typer.BadParameter(
            f"a saved run is a path through the {RUN_MACHINE.name!r} machine", param_hint="--machine"
        )
    if format is Format.png and output is None:
        raise typer.BadParameter("PNG is binary: give a file with --output", param_hint="--format")
    chosen = load_machine(machine or RUN_MACHINE.name)
    name = chosen.name
    try:
        if all_:
            assert output is not None
            for file in write_all(output):
                typer.echo(str(file))
            return
        data = _draw(chosen, format, trace, sequence, direction.value if direction is not None else None, fitted)
    except (TraceError, GraphvizMissing) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot write {exc.filename}: {exc.strerror}" if exc.filename else str(exc)) from None
    _emit(data, output, f"{'sequence' if sequence else name}.{_SUFFIX[format]}")


def _emit(data: bytes, output: Path | None, file_name: str) -> None:
    """``data`` to standard output (no ``output``), to ``output``, or to ``file_name`` in the folder ``output``."""
    if output is None:
        typer.echo(clean(data.decode()), nl=False)
        return
    if output.is_dir():
        output = output / file_name
    try:
        output.write_bytes(data)
    except OSError as exc:
        raise _fail(f"cannot write {output}: {exc.strerror}") from None


def _draw_world(
    world: str,
    format: Format,
    output: Path | None,
    direction: str | None,
    size: tuple[float, float] | None,
    *,
    full: bool,
    trace: Path | None,
    sequence: bool,
) -> None:
    """
    The agent ``--world`` names, written to ``output`` (a folder: <name>.<ext>, or <name>-composition.<ext>).

    Its machine as configured (``full``: the whole table); with the agents it nests, one box each; with a
    ``trace``, the path the saved run (and each run nested in it) took.
    """
    from agent_fsm.cli.runs import load_world  # the store's modules load only when an agent is named

    if format is Format.png and output is None:
        raise typer.BadParameter("PNG is binary: give a file with --output", param_hint="--format")
    agent = load_world(world)  # found in the folder the command runs in, as a machine's module is
    layout: Direction = direction if direction is not None else DEFAULT_DIRECTION  # type: ignore[assignment]
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", agent.name or "agent")
    try:
        state = _read_trace(trace) if trace is not None else None
        if sequence:
            assert state is not None
            _emit(clean(sequence_diagram(state), "utf-8").encode(), output, f"{name}-sequence.{_SUFFIX[format]}")
            return
        nests = any(isinstance(spec.handler, Nested) for spec in agent.tools.values())
        if state is not None and state.children:
            data = _drawn_runs(state, agent, format, layout, direction, size, full)
        elif state is None and nests:
            if format is Format.mermaid:
                data = clean(composition_mermaid(agent, direction=direction, full=full), "utf-8").encode()
            elif format is Format.dot:
                data = clean(composition_dot(agent, direction=layout, size=size, full=full), "utf-8").encode()
            else:
                data = render_composition(agent, format.value, direction=layout, size=size, full=full)
        else:
            path = path_on_agent(state, agent, full=full) if state is not None else None
            drawn_machine = path.machine if path is not None else RUN_MACHINE if full else agent.machine()
            title = agent_title(agent.name, drawn_machine, RUN_MACHINE)
            data = _drawn(drawn_machine, format, path, direction, size, title)
            _emit(data, output, f"{name}.{_SUFFIX[format]}")
            return
    except (TraceError, GraphvizMissing) as exc:
        raise _fail(str(exc)) from None
    _emit(data, output, f"{name}-composition.{_SUFFIX[format]}")


def _drawn_runs(
    state: RunState,
    agent: Agent | None,
    format: Format,
    layout: Direction,
    direction: str | None,
    size: tuple[float, float] | None,
    full: bool,
) -> bytes:
    """A saved run and the runs nested in it, each with its path, in ``format``."""
    if format is Format.mermaid:
        return clean(runs_mermaid(state, agent=agent, direction=direction, full=full), "utf-8").encode()
    source = runs_dot(state, agent=agent, direction=layout, size=size, full=full)
    if format is Format.dot:
        return clean(source, "utf-8").encode()
    return drawn(source, format.value)


def _read_trace(trace: Path) -> RunState:
    try:
        text = trace.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"cannot read trace {trace}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"trace {trace} is not UTF-8 text: {exc.reason}") from None
    return load_trace(text)


def _drawn(
    machine: MachineSpec,
    format: Format,
    path: RunPath | None,
    direction: str | None,
    size: tuple[float, float] | None,
    title: str | None = None,
) -> bytes:
    """``machine`` (with ``path``) in ``format``."""
    if format is Format.mermaid:
        return clean(to_mermaid(machine, path=path, direction=direction, title=title), "utf-8").encode()
    layout: Direction = direction if direction is not None else DEFAULT_DIRECTION  # type: ignore[assignment]
    if format is Format.dot:
        return clean(to_dot(machine, path=path, direction=layout, size=size, title=title), "utf-8").encode()
    return render(machine, format.value, path=path, direction=layout, size=size, title=title)


def _draw(
    machine: MachineSpec,
    format: Format,
    trace: Path | None,
    sequence: bool,
    direction: str | None = None,
    size: tuple[float, float] | None = None,
) -> bytes:
    path = None
    if trace is not None:
        state = _read_trace(trace)
        if sequence:
            # A trace is outside text: a lone surrogate in it is drawn as its escape.
            return clean(sequence_diagram(state), "utf-8").encode()
        if state.children:  # the runs nested in its calls are drawn inside it, each with its path
            layout: Direction = direction if direction is not None else DEFAULT_DIRECTION  # type: ignore[assignment]
            return _drawn_runs(state, None, format, layout, direction, size, full=True)
        path = path_of(state)
    return _drawn(machine, format, path, direction, size)
