"""The ``agent-fsm runs`` tests' shared part: the command run in-process (the ``paused`` store is in conftest)."""

from __future__ import annotations

from typer.testing import CliRunner

from agent_fsm.cli import app

__all__ = ["WORLD", "runs"]

WORLD = "agent_fsm.examples.durable:world"
"""The durable example's agent, as ``--world`` names it."""

_RUNNER = CliRunner()


def runs(*args: str) -> tuple[int, str, str]:
    """``agent-fsm runs ARGS``: its exit code, standard output and standard error."""
    result = _RUNNER.invoke(app, ["runs", *args])
    return result.exit_code, result.stdout, result.stderr
