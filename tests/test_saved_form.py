"""The saved form of a run state: texts written by earlier versions read back and are written again byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_fsm import RunState

SAVED = sorted((Path(__file__).parent / "saved_states").glob("*.json"))


def test_there_are_recorded_states() -> None:
    """The recorded states are found (an empty glob would make the test below pass on nothing)."""
    assert len(SAVED) >= 8


@pytest.mark.parametrize("path", SAVED, ids=lambda p: p.stem)
def test_a_recorded_state_is_written_again_byte_for_byte(path: Path) -> None:
    """A state saved by an earlier version reads back and ``to_json`` writes exactly the recorded text."""
    text = path.read_text().rstrip("\n")
    assert RunState.from_json(text).to_json() == text
