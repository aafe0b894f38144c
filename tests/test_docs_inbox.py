"""docs/inbox.md: its Python runs as written, its screenshots exist, and the commands it shows exist."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from agent_fsm.cli import app

DOC = Path(__file__).resolve().parent.parent / "docs" / "inbox.md"


def test_code_blocks_run_as_written(graphviz_dot: str) -> None:
    """The saved page, the paged listing and the app's construction run in one namespace."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 3
    namespace: dict[str, object] = {"__name__": "docs_inbox"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)


def test_every_screenshot_shown_is_committed() -> None:
    """Each image the page shows is a PNG in docs/images, taken by the browser tests."""
    shown = re.findall(r"!\[[^\]]*\]\((images/[^)]+)\)", DOC.read_text())
    assert len(shown) == 6
    tests = "".join(path.read_text() for path in Path(__file__).parent.glob("test_web_browser*.py"))
    for image in shown:
        assert (DOC.parent / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image
        assert f'"{Path(image).name}"' in tests, f"{image} is not taken by the browser tests"


def test_the_commands_shown_exist() -> None:
    """``agent-fsm view`` and ``agent-fsm inbox`` take the options the page shows."""
    runner = CliRunner()
    for name in ("view", "inbox"):
        shown = re.findall(rf"agent-fsm {name} (.*)$", DOC.read_text(), flags=re.MULTILINE)
        assert shown, name
        helped = runner.invoke(app, [name, "--help"])
        assert helped.exit_code == 0, helped.output
        for option in {o for line in shown for o in re.findall(r"(--[a-z-]+|-o)\b", line)}:
            assert option in helped.output, (name, option)
