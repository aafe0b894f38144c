"""Every command prints outside text it cannot encode (lone surrogates included) as escapes, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_fsm import ScriptedModel, answer_message, run
from agent_fsm.cli import app
from agent_fsm.cli import run as run_cli
from agent_fsm.cli._text import clean
from agent_fsm.examples.support_desk import make_support_desk

REPO = Path(__file__).resolve().parents[1]
OVERREACH = REPO / "specs" / "support_desk" / "overreach_denied.toml"
LONE = "\ud800"

runner = CliRunner()


def _surrogate_model() -> ScriptedModel:
    call = {
        "role": "assistant",
        "content": f"checking {LONE}",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"order_id": "A-\\ud800"}'},
            }
        ],
    }
    return ScriptedModel([call, answer_message(f"done \udfff {LONE}")])


def test_clean_escapes_what_cannot_be_encoded() -> None:
    """Lone surrogates become their escapes; text that encodes is returned unchanged."""
    assert clean(f"a{LONE}b", "utf-8") == "a\\ud800b"
    assert clean("héllo ✓", "utf-8") == "héllo ✓"
    assert clean("héllo", "ascii") == "h\\xe9llo"
    assert clean(f"x{LONE}", "no-such-codec") == "x\\ud800"


@pytest.mark.parametrize("args", [[], ["--sequence"], ["--format", "dot"]])
def test_diagram_of_a_trace_with_lone_surrogates(tmp_path: Path, args: list[str]) -> None:
    """A saved run whose task, thoughts and arguments carry lone surrogates draws cleanly."""
    result = run(f"task {LONE}", _surrogate_model(), make_support_desk().tools)
    trace = tmp_path / "trace.json"
    trace.write_text(result.state.to_json())
    drawn = runner.invoke(app, ["diagram", "--trace", str(trace), *args])
    assert drawn.exit_code == 0, drawn.output
    assert drawn.exception is None
    if args == ["--sequence"]:
        assert "\\ud800" in drawn.stdout


def test_run_with_a_provider_reply_carrying_lone_surrogates(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model reply with lone surrogates (as a provider's JSON may carry) prints as escapes in agent-fsm run."""

    def provider_model(*_: Any) -> ScriptedModel:
        return _surrogate_model()

    monkeypatch.setattr(run_cli, "_provider_model", provider_model)
    result = runner.invoke(app, ["run", str(OVERREACH), "--provider", "openai"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1  # the spec's expectations do not hold for this reply
    assert "done \\udfff \\ud800" in result.stdout
