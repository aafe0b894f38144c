"""``agent-fsm run --provider``: a spec run against a real HTTP model on loopback."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from agent_fsm.cli import app

from .loopback import (
    LoopbackServer,
    free_port_refusing,
    openai_answer,
    openai_tool_call,
)

SPECS = Path(__file__).resolve().parents[2] / "specs"
runner = CliRunner()


def test_spec_runs_against_an_openai_compatible_server(server: LoopbackServer) -> None:
    """The spec's task and tools go to the server; its replies drive the run and the expectations are judged."""
    server.script(
        openai_tool_call("srv_1", "lookup_order", '{"order_id": "A-17"}'),
        openai_answer("All set: A-17 is refunded, complete."),
    )
    result = runner.invoke(
        app,
        [
            "run",
            str(SPECS / "support_desk" / "liar.toml"),
            "--provider",
            "openai",
            "--base-url",
            f"{server.url}/v1",
            "--model",
            "test-model",
        ],
    )
    assert "-> lookup_order" in result.stdout and "[srv_1]" in result.stdout
    assert "ending: answered" in result.stdout
    assert len(server.requests) == 2
    assert server.requests[0].body["model"] == "test-model"
    # the liar spec expects one turn; this server's model looked the order up first, so it does not hold
    assert "FAILED  turns: expected 1, got 2" in result.stdout
    assert result.exit_code == 1


def test_unreachable_provider_ends_provider_error(server: LoopbackServer) -> None:
    """A refused connection is a provider_error ending, reported, not a traceback."""
    result = runner.invoke(
        app,
        [
            "run",
            str(SPECS / "support_desk" / "liar.toml"),
            "--provider",
            "openai",
            "--base-url",
            f"{free_port_refusing()}/v1",
            "--model",
            "m",
        ],
    )
    assert "ending: provider_error" in result.stdout
    assert "provider fault: ProviderFailure (transport)" in result.stdout
    assert result.exit_code == 1
    assert "Traceback" not in result.stdout + result.stderr


def test_provider_options_without_provider_are_a_usage_error() -> None:
    """--model without --provider is refused with exit code 2."""
    result = runner.invoke(app, ["run", str(SPECS / "support_desk" / "liar.toml"), "--model", "m"])
    assert result.exit_code == 2


def test_bad_provider_configuration_is_one_line() -> None:
    """A provider that cannot be configured (no model name) exits 1 with one line."""
    result = runner.invoke(
        app,
        [
            "run",
            str(SPECS / "support_desk" / "liar.toml"),
            "--provider",
            "openai",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
    )
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "error:" in result.stderr
