"""docs/observability.md: every Python block runs as written, in order, and the --follow output shown is current."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from agent_fsm.cli import app

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "observability.md"


def test_code_blocks_run_as_written() -> None:
    """Logging, events, a held-back answer, spans and a paused-then-resumed run's spans, in one namespace."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 6
    namespace: dict[str, object] = {"__name__": "docs_observability"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["done"].stop.value == "answered"  # type: ignore[attr-defined]


def test_the_nested_follow_sample_is_what_the_block_prints(capsys) -> None:
    """The nested-runs sample (the console block) is what the block before it writes now, line for line."""
    text = DOC.read_text()
    nested = text.split("### Nested runs", 1)[1]
    (block,) = re.findall(r"```python\n(.*?)```", nested, flags=re.DOTALL)
    (shown,) = re.findall(r"```console\n(.*?)```", nested, flags=re.DOTALL)
    exec(compile(block, str(DOC), "exec"), {"__name__": "docs_observability_nested"})
    printed = capsys.readouterr().out
    assert printed.strip() == shown.strip()
    assert "state   | [t1] Ready --next_turn--> Proposing" in printed


def test_the_follow_output_shown_is_what_the_command_prints(monkeypatch) -> None:
    """The page's --follow sample is the command's live output now, line for line."""
    (shown,) = re.findall(r"```text\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    command = re.search(r"`agent-fsm run (\S+) --follow`:", DOC.read_text())
    assert command is not None
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(app, ["run", command.group(1), "--follow"])
    assert result.exit_code == 0, result.output
    live = result.stdout.split("\n\nspec ", 1)[0]
    assert live.strip() == shown.strip()
