"""docs/tour.md and docs/machine.md: every Python block runs as written, in order, and says what it claims."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_fsm import RunState
from agent_fsm.cli import app

ROOT = Path(__file__).resolve().parent.parent


def _run(name: str) -> dict[str, object]:
    page = ROOT / "docs" / name
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL)
    assert blocks, f"{name} has no python examples"
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)  # the page's own code, run as a reader would
    return namespace


def test_tour_runs_as_written(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The tour's blocks run in one namespace: 40.00 paid after a denial, 10.00 after an approval, then async."""
    monkeypatch.delenv("AGENT_FSM_REFUNDS", raising=False)  # the store example sets it; restored afterwards
    namespace = _run("tour.md")
    ledger = namespace["ledger"]
    assert isinstance(ledger, list)
    # the denied 90.00 never lands; the ten concurrent arun and the one streamed run pay 10.00 each
    assert [entry["cents"] for entry in ledger] == [4000, 1000] + [1000] * 11
    # the shell lines open the store the Python made: its export reads ticket-2 there
    export = next(line for line in (ROOT / "docs" / "tour.md").read_text().splitlines() if "runs export" in line)
    args = shlex.split(export.split("&&")[0].replace("$STORE", str(namespace["url"])))
    target = tmp_path / "ticket-2.json"
    done = CliRunner().invoke(app, [*args[1:-1], str(target)])
    assert done.exit_code == 0, done.stderr
    assert RunState.from_json(target.read_text()).run_id == "ticket-2"


def test_machine_page_runs_as_written() -> None:
    """The run machine page's blocks run: the checker's report holds, the wanderer ends at its turn budget."""
    namespace = _run("machine.md")
    assert namespace["report"].ok  # type: ignore[attr-defined]
    assert namespace["stuck"].state.turns == 5  # type: ignore[attr-defined]


@pytest.mark.parametrize("page", ["machine.md", "tour.md"])
def test_page_lists_every_stop(page: str) -> None:
    """The page's endings table names every stop of the engine's ``Stop``, once each, and nothing else."""
    from agent_fsm import Stop

    text = (ROOT / "docs" / page).read_text()
    listed = re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.MULTILINE)
    assert sorted(listed) == sorted(stop.value for stop in Stop)
