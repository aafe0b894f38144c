"""``agent-fsm run SPEC --follow``: one line per event as the run moves, streamed text inline, nothing forged."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from typer.testing import CliRunner

from agent_fsm import RunEvent, ScriptedModel, StateEntered, TextDelta, ToolSpec, answer_message, run, tool_call_message
from agent_fsm.cli import app
from agent_fsm.cli.follow import Follower, event_line
from tests.test_events import Streaming

REPO = Path(__file__).resolve().parents[1]
OVERREACH = REPO / "specs" / "support_desk" / "overreach_denied.toml"
REJECTS = REPO / "specs" / "support_desk" / "manager_rejects.toml"

runner = CliRunner()


def _follow(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["run", *args, "--follow"])
    return result.exit_code, result.stdout


def test_follow_prints_each_event_then_the_report() -> None:
    """Every state entered, model call, proposal, judgement and observation, in order, before the usual report."""
    code, out = _follow(str(OVERREACH))
    assert code == 0
    live, report = out.split("\nspec support-desk/overreach-denied", 1)
    lines = live.strip().splitlines()
    assert lines[0] == f"following support-desk/overreach-denied ({OVERREACH})"
    states = [line.split("--> ")[1] for line in lines if line.startswith("state   |")]
    assert states == ["Proposing", "Executing", "Ready", "Proposing", "Denied", "Ready"] + [
        "Proposing",
        "Executing",
        "Ready",
        "Proposing",
        "Answered",
    ]
    assert 'propose | refund_order {"order_id": "A-17", "amount_cents": 9999}  [call_2]' in lines
    assert "judge   | denied: refunds above 5000 cents need a manager  [call_2]" in lines
    assert "state   | Proposing --judge [call_rejected]--> Denied" in lines
    assert lines[-1] == "ended   | answered"
    assert sum(line.startswith("model   | asked") for line in lines) == 4
    assert "ending: answered" in report and "ok      invariant effects_authorized: True" in report


def test_without_follow_no_event_is_printed() -> None:
    result = runner.invoke(app, ["run", str(OVERREACH)])
    assert result.exit_code == 0 and "state   |" not in result.stdout and "following" not in result.stdout


def test_follow_shows_the_pause_and_the_resumed_run() -> None:
    """A spec that pauses and is decided: the pause, its ending, then the decision's edge and what follows."""
    code, out = _follow(str(REJECTS))
    assert code == 0
    lines = out.split("\nspec ", 1)[0].splitlines()
    paused = next(i for i, line in enumerate(lines) if line.startswith("paused  |"))
    assert "refund_order waits for a human" in lines[paused]
    assert lines[paused + 2].startswith("ended   | awaiting_approval")
    assert lines[paused + 3] == "state   | AwaitingApproval --reject--> Denied"
    assert lines[-1] == "ended   | answered"


def test_follow_works_for_a_directory_of_specs(tmp_path: Path) -> None:
    for name in ("overreach_denied", "happy_path"):
        (tmp_path / f"{name}.toml").write_text((REPO / "specs" / "support_desk" / f"{name}.toml").read_text())
    code, out = _follow(str(tmp_path))
    assert code == 0
    assert out.count("ended   | answered") == 2 and "2 of 2 specs held" in out


def test_events_are_written_while_the_run_moves() -> None:
    """Live, not after the fact: when the handler runs, the lines up to its call's judgement are already out."""
    written: list[str] = []
    seen_by_handler: list[str] = []

    def balance(account: str) -> int:
        seen_by_handler.append("".join(written))
        return 7

    tools = {"balance": ToolSpec("Read a balance.", {"account": str}, balance)}
    model = ScriptedModel([tool_call_message("c1", "balance", {"account": "ACME"}), answer_message("7")])
    run("read", model, tools, on_event=Follower(written.append))
    (before,) = seen_by_handler
    assert 'propose | balance {"account": "ACME"}  [c1]' in before and "judge   | allow" in before
    assert "observe |" not in before and "ended" not in before
    assert "".join(written).endswith("ended   | answered\n")


def test_streamed_text_is_written_inline_as_it_arrives() -> None:
    """A streaming model's deltas form one text line, written piece by piece; the reply's line does not repeat it."""
    written: list[str] = []
    run("t", Streaming("hello world"), {}, on_event=Follower(written.append))
    text = "".join(written)
    assert "text    | hello world\nmodel   | replied with an answer (" in text
    assert "hello world" not in text.split("text    | hello world\n", 1)[1]
    assert written.count("hel") == 1 and written.count("lo ") == 1  # the fragments, each written as it came

    async def streamed() -> str:
        out: list[str] = []
        from agent_fsm import arun

        await arun("t", Streaming("hello world"), {}, on_event=Follower(out.append))
        return "".join(out)

    assert "text    | hello world\n" in asyncio.run(streamed())


def test_model_text_cannot_move_the_cursor_or_forge_a_line() -> None:
    """Escape sequences and newlines in model text, arguments and results are shown escaped, on their own line."""
    hostile = "done\x1b[2J\r\nended   | answered\u2028"

    def echo(note: str) -> str:
        return note

    tools = {"echo": ToolSpec("Echo a note.", {"note": str}, echo)}
    model = ScriptedModel([tool_call_message("c1", "echo", {"note": hostile}), answer_message(hostile)])
    written: list[str] = []
    run("t", model, tools, on_event=Follower(written.append))
    text = "".join(written)
    assert "\x1b" not in text and "\r" not in text and "\u2028" not in text
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("ended")] == ["ended   | answered"]  # the forged one stays inside
    assert "ended   | answered\\u2028" in text  # shown, escaped, within the reply's line
    assert all(re.match(r"^[a-z]+ +\| ", line) for line in lines)
    streamed: list[str] = []
    run("t", Streaming(hostile), {}, on_event=Follower(streamed.append))
    lines = "".join(streamed).splitlines()
    assert "\x1b" not in "".join(streamed) and all(re.match(r"^[a-z]+ +\| ", line) for line in lines)
    assert [line for line in lines if line.startswith("ended")] == ["ended   | answered"]


def test_every_event_type_has_a_line() -> None:
    """No event is silently dropped: each type the drivers post renders (text deltas go inline)."""
    events: list[RunEvent] = []
    from tests.payments import make_payments, pay_call, pay_gate

    tools, _ = make_payments()
    run("pay", ScriptedModel([pay_call(500), pay_call(50, "c2")]), tools, gate=pay_gate, on_event=events.append)
    kinds = {type(e).__name__ for e in events}
    assert kinds >= {"StateEntered", "ModelRequested", "ModelReplied", "Proposed", "Judged", "Observed", "Paused"}
    assert all(event_line(e) for e in events)
    assert isinstance(events[0], StateEntered)


def test_every_event_class_has_a_branch() -> None:
    """Each event class the engine can post is given its own line (a new event needs one here)."""
    import inspect

    from agent_fsm.cli import follow
    from agent_fsm.engine._events import EVENT_TYPES

    source = inspect.getsource(follow.event_line)
    missing = [cls.__name__ for cls in EVENT_TYPES.values() if cls is not TextDelta]
    missing = [name for name in missing if f"isinstance(event, {name})" not in source]
    assert missing == []
