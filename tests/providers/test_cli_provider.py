"""``agent-fsm run --provider``: a spec run against a real HTTP model on loopback."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_fsm.cli import app

from .loopback import (
    LoopbackServer,
    free_port_refusing,
    json_reply,
    openai_answer,
    openai_tool_call,
)
from .recordings import NATIVE_RECORDINGS

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


def _native_replies(provider: str) -> list[Any]:
    """A lookup of A-17 then an answer, written over the provider's recorded replies (only call and text changed)."""
    by_name = {r.name: r for r in NATIVE_RECORDINGS}
    if provider == "gemini":
        call = copy.deepcopy(by_name["google__test_google_tool_output"].response(0))
        call["candidates"][0]["content"]["parts"] = [
            {"functionCall": {"name": "lookup_order", "args": {"order_id": "A-17"}}}
        ]
        answer = copy.deepcopy(by_name["google__test_google_model_max_tokens"].response(0))
        answer["candidates"][0].update(finishReason="STOP", content={"role": "model", "parts": [{"text": "Done."}]})
        return [json_reply(call), json_reply(answer)]
    call = copy.deepcopy(by_name["openai__test_openai_responses_model_simple_response_with_tool_call"].response(0))
    call["output"][0].update(name="lookup_order", arguments='{"order_id": "A-17"}', call_id="srv_1")
    answer = copy.deepcopy(by_name["openai__test_openai_responses_model_simple_response"].response(0))
    answer["output"][0]["content"][0]["text"] = "Done."
    return [json_reply(call), json_reply(answer)]


@pytest.mark.parametrize(("provider", "suffix"), [("openai-responses", "/v1"), ("gemini", "/v1beta")])
def test_spec_runs_against_the_native_apis(server: LoopbackServer, provider: str, suffix: str) -> None:
    """``--provider openai-responses`` and ``--provider gemini`` drive the spec over their own wire formats."""
    server.script(*_native_replies(provider))
    result = runner.invoke(
        app,
        ["run", str(SPECS / "support_desk" / "liar.toml"), "--provider", provider,
         "--base-url", f"{server.url}{suffix}", "--model", "test-model"],
    )  # fmt: skip
    assert "-> lookup_order" in result.stdout and "ending: answered" in result.stdout
    assert len(server.requests) == 2
    assert server.requests[0].path.endswith("/responses" if provider == "openai-responses" else ":generateContent")
