"""``agent-fsm runs fork`` and the checkpoints ``runs show`` lists, against a real SQLite store."""

from __future__ import annotations

from typer.testing import CliRunner

from tests.cli_store import WORLD, runs

runner = CliRunner()


def test_show_lists_the_checkpoints_and_a_fork_says_where_it_came_from(paused: str) -> None:
    """The parent lists checkpoint 0 (as begun) to its pause; the fork's show names the parent and the point."""
    code, out, _ = runs("show", "ticket-1", "--store", paused)
    assert code == 0 and "checkpoint 0: Ready" in out and "checkpoint 1: AwaitingApproval (awaiting_approval)" in out
    code, out, _ = runs("fork", "ticket-1", "--store", paused, "--at", "1", "--as", "ticket-1b")
    assert (code, out.strip()) == (0, "ticket-1b: forked from ticket-1 at checkpoint 1 (AwaitingApproval)")
    code, out, _ = runs("show", "ticket-1b", "--store", paused)
    assert code == 0 and "forked from ticket-1 at its checkpoint 1" in out and "paused" in out
    code, out, _ = runs("list", "--store", paused, "--status", "paused")
    assert "ticket-1b" in out and "pause ticket-1b.1" in out


def test_a_fork_from_the_beginning_goes_on_with_the_world_given(paused: str) -> None:
    """With --world, a fork of a running point is driven on until it rests (here: the same pause, in the new run)."""
    code, out, err = runs("fork", "ticket-1", "--store", paused, "--at", "0", "--as", "again", "--world", WORLD)
    assert code == 0, err
    assert out.splitlines() == [
        "again: forked from ticket-1 at checkpoint 0 (Ready)",
        "again: awaiting_approval (refunds above 5000 cents need a person's approval)",
    ]


def test_a_fork_that_cannot_be_made_fails_in_one_line(paused: str) -> None:
    """No such checkpoint, an id taken: exit 1 with the reason."""
    code, _, err = runs("fork", "ticket-1", "--store", paused, "--at", "7", "--as", "x")
    assert code == 1 and err.startswith("error: run 'ticket-1' has no checkpoint 7")
    code, _, err = runs("fork", "ticket-1", "--store", paused, "--at", "0", "--as", "ticket-1")
    assert code == 1 and "already stored under 'ticket-1'" in err


def test_a_checkpoint_number_too_large_is_one_line(paused: str) -> None:
    """``--at 10**30`` is exit 1 with the range in one line, not a traceback."""
    code, _, err = runs("fork", "ticket-1", "--store", paused, "--at", str(10**30), "--as", "x")
    assert code == 1 and err.startswith("error: a checkpoint is numbered 0, 1, 2 ... up to 2**63-1")
    assert err.count("\n") == 1 and "Traceback" not in err
