"""Diagrams of users' machines: --machine module:attribute, no regenerate comment, readable PNGs, human decisions."""

from __future__ import annotations

import shutil
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_fsm import Limits, ScriptedModel, Stop, answer_message, resume, run, tool_call_message
from agent_fsm.cli import app
from agent_fsm.diagrams.dot import to_dot
from agent_fsm.diagrams.mermaid import REGENERATE_COMMAND, to_mermaid
from agent_fsm.diagrams.sequence import sequence_diagram
from agent_fsm.engine import RUN_MACHINE, Edge, MachineSpec, StateSpec, ask_for_effects
from agent_fsm.examples.support_desk import make_support_desk

runner = CliRunner()

USER_MACHINE = MachineSpec(
    name="booking",
    initial="Asking",
    budgets={"tries": "questions asked"},
    states=(
        StateSpec("Asking", "working", "A date is asked for."),
        StateSpec("Booked", "absorbing", "The room is booked.", stop="booked"),
    ),
    edges=(Edge("Asking", "answer", "Asking", guard="unclear", consumes="tries"), Edge("Asking", "answer", "Booked")),
)

MODULE = """
from agent_fsm import Edge, MachineSpec, StateSpec

BOOKING = MachineSpec(
    name="booking",
    initial="Asking",
    budgets={"tries": "questions asked"},
    states=(StateSpec("Asking", "working", "A date."), StateSpec("Booked", "absorbing", "Booked.", stop="booked")),
    edges=(Edge("Asking", "answer", "Asking", guard="unclear", consumes="tries"), Edge("Asking", "answer", "Booked")),
)
NOT_A_MACHINE = 3
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of the user's declaring a MachineSpec, importable from the working directory."""
    (tmp_path / "bookmachines_q.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield "bookmachines_q"
    sys.modules.pop("bookmachines_q", None)


def test_cli_draws_a_users_machine(user_module: str) -> None:
    """--machine module:attribute draws the user's MachineSpec, without our regenerate comment."""
    drawn = runner.invoke(app, ["diagram", "--machine", f"{user_module}:BOOKING"])
    assert drawn.exit_code == 0, drawn.output
    assert "Asking --> Asking: answer [unclear] / spends tries" in drawn.stdout
    assert REGENERATE_COMMAND not in drawn.stdout and "agent-fsm diagram --all" not in drawn.stdout


def test_cli_refuses_what_is_not_a_machine(user_module: str) -> None:
    """An attribute that is not a MachineSpec, or a module that is missing, fails in one line."""
    wrong = runner.invoke(app, ["diagram", "--machine", f"{user_module}:NOT_A_MACHINE"])
    assert wrong.exit_code == 1 and "is a int, expected an agent_fsm MachineSpec" in wrong.stderr
    missing = runner.invoke(app, ["diagram", "--machine", "no_such_module_zz:X"])
    assert missing.exit_code == 1 and "cannot import 'no_such_module_zz'" in missing.stderr


def test_regenerate_comment_only_on_our_machines() -> None:
    """Our catalog machines say how to regenerate them; a user's machine does not."""
    assert REGENERATE_COMMAND in to_mermaid(RUN_MACHINE)
    assert REGENERATE_COMMAND not in to_mermaid(USER_MACHINE)
    assert "direction LR" in to_mermaid(USER_MACHINE, direction="LR")


def test_dot_direction_and_size_options() -> None:
    """The layout direction and a fitting size reach the DOT source; bad values are refused."""
    assert "rankdir=LR" in to_dot(USER_MACHINE)
    assert "rankdir=TB" in to_dot(USER_MACHINE, direction="TB")
    assert 'size="12,8"' in to_dot(USER_MACHINE, size=(12, 8))
    with pytest.raises(ValueError, match="direction"):
        to_dot(USER_MACHINE, direction="XY")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="size"):
        to_dot(USER_MACHINE, size=(0, 8))


def _png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_png_is_sized_for_a_screen(tmp_path: Path) -> None:
    """The run machine's PNG is laid out to be read on a screen (not a strip), and --size shrinks it."""
    # About 2,200 px since the table gained the edge from Executing to AwaitingApproval (an unknown outcome),
    # about 2,950 px since it gained the screening states (ScreeningResult and Intercepted add a rank),
    # about 3,100 px with typed output's retry, compaction, the cost budget and a fallback chain,
    # about 3,250 px with a person's answer (TakingAnswer adds a rank beside Executing).
    default = tmp_path / "run.png"
    assert runner.invoke(app, ["diagram", "-f", "png", "-o", str(default)]).exit_code == 0
    width, height = _png_size(default)
    assert width <= 3400 and width / height < 2
    small = tmp_path / "small.png"
    assert runner.invoke(app, ["diagram", "-f", "png", "-o", str(small), "--size", "8,6"]).exit_code == 0
    assert _png_size(small)[0] <= 8 * 96 + 2
    bad = runner.invoke(app, ["diagram", "-f", "png", "-o", str(small), "--size", "8"])
    assert bad.exit_code == 2


def _approval_run(approve: bool) -> Any:
    desk = make_support_desk()
    model = ScriptedModel(
        [
            tool_call_message("c1", "refund_order", {"order_id": "A-17", "amount_cents": 100}),
            answer_message("done"),
        ]
    )
    gate = ask_for_effects(desk.tools)
    paused = run("refund A-17", model, desk.tools, gate=gate, limits=Limits(max_turns=3))
    assert paused.stop is Stop.AWAITING_APPROVAL
    return resume(paused.state, model, desk.tools, approve=approve, gate=gate, limits=Limits(max_turns=3))


def test_sequence_shows_the_human_approving() -> None:
    """An approved call is drawn with the gate asking and the human approving, then the tool running."""
    diagram = sequence_diagram(_approval_run(True))
    assert "participant human" in diagram
    assert "gate-->>engine: ask" in diagram
    assert "human--)engine: approved" in diagram
    assert diagram.index("human--)engine: approved") < diagram.index("engine->>tool: refund_order")
    assert "gate-->>engine: allow" not in diagram


def test_sequence_shows_the_human_rejecting() -> None:
    """A rejected call is drawn with the human's refusal and no tool call."""
    diagram = sequence_diagram(_approval_run(False))
    assert "participant human" in diagram and "human--)engine: rejected by a human reviewer" in diagram
    assert "engine->>tool" not in diagram


def test_sequence_of_a_gate_allowed_call_has_no_human() -> None:
    """A call the gate allowed on its own is drawn as allowed, with no human."""
    desk = make_support_desk()
    model = ScriptedModel([tool_call_message("c1", "lookup_order", {"order_id": "A-17"}), answer_message("ok")])
    diagram = sequence_diagram(run("look", model, desk.tools))
    assert "gate-->>engine: allow" in diagram and "human" not in diagram
