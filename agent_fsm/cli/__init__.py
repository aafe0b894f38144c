"""
The ``agent-fsm`` command line.

One module per command group (``diagram``, ``run``, ``eval``, ``charts``, ``runs``, ``view``, ``inbox``, ``serve``,
``mcp``, and ``reference`` for the reference systems' ``lookup`` and ``refine``); each is
registered here, so this file stays a table of contents. Exit codes: 0 success, 1 a failure
reported in one line, 2 a usage error (from the CLI library).
"""

from __future__ import annotations

import typer

from agent_fsm.cli.charts import charts_command
from agent_fsm.cli.diagram import diagram_command
from agent_fsm.cli.eval import eval_command
from agent_fsm.cli.inbox import inbox_command
from agent_fsm.cli.mcp import mcp_app
from agent_fsm.cli.reference import lookup_command, refine_command
from agent_fsm.cli.run import run_command
from agent_fsm.cli.runs import runs_app
from agent_fsm.cli.serve import serve_command
from agent_fsm.cli.view import view_command
from agent_fsm.examples.compare import compare_command

app = typer.Typer(
    name="agent-fsm",
    help="Run tool-calling agents as an explicit finite-state machine: demos, specs, diagrams.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Run tool-calling agents as an explicit finite-state machine: demos, specs, diagrams."""


@app.command()
def demo() -> None:
    """Run the support-desk demo: an over-reaching refund, denied by the gate, then corrected."""
    from agent_fsm.examples.demo import main

    raise typer.Exit(main())


app.command(name="compare")(compare_command)
app.command(name="run")(run_command)
app.command(name="eval")(eval_command)
app.command(name="diagram")(diagram_command)
app.command(name="charts")(charts_command)
app.add_typer(runs_app, name="runs")
app.command(name="view")(view_command)
app.command(name="inbox")(inbox_command)
app.command(name="serve")(serve_command)
app.add_typer(mcp_app, name="mcp")
app.command(name="lookup")(lookup_command)
app.command(name="refine")(refine_command)


def main() -> None:
    """Entry point of the ``agent-fsm`` console script."""
    app()
