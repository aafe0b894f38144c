"""``--follow`` with nested runs: each nested run's lines carry its call path, indented by depth, nothing forged."""

from __future__ import annotations

import re

from agent_fsm import Agent, ScriptedModel, Verdict, answer_message, tool_call_message
from agent_fsm.cli.follow import Follower, event_line, nesting_mark
from tests.nested_world import desk_agent
from tests.test_events import Streaming


def _followed(agent: Agent, run_id: str) -> list[str]:
    written: list[str] = []
    agent.run("refund A1", on_event=Follower(written.append), run_id=run_id)
    return "".join(written).splitlines()


def test_each_level_is_marked_with_its_call_path_and_indented() -> None:
    """Two levels down: the top's lines bare, [d1] for triage, two spaces and [d1/t1] for refunds, in order."""
    lines = _followed(desk_agent(), "ticket-7")
    assert all(re.match(r"^[a-z]+ +\| ", line) for line in lines)
    marks = [re.match(r"^[a-z]+ +\| ( *\[[^\]]+\] )?", line).group(1) or "" for line in lines]  # type: ignore[union-attr]
    assert set(marks) == {"", "[d1] ", "  [d1/t1] "}
    ends = [line for line in lines if line.startswith("ended")]
    assert [e.split("|")[1].split(" awaiting")[0] for e in ends] == ["   [d1/t1]", " [d1]", ""]
    assert 'propose |   [d1/t1] refund {"order": "A1", "cents": 9000}  [r1]' in lines
    assert "state   | [d1] Proposing --judge [call_allowed]--> Executing" in lines
    assert lines[0] == "state   | Ready --next_turn--> Proposing"


def test_a_nested_runs_streamed_text_is_marked_too() -> None:
    """A nested agent that streams: its text line carries the mark before the text."""
    echo = Agent(Streaming("hello from below"), {}, name="echo")
    top = Agent(
        ScriptedModel([tool_call_message("e1", "echo", {"task": "say hi"}), answer_message("It said hello.")]),
        {"echo": echo.as_tool()},
        gate=lambda call: Verdict.allow(),
        name="top",
    )
    lines = _followed(top, "s-1")
    assert "text    | [e1] hello from below" in lines


def test_the_mark_is_relative_to_the_followed_run_and_escaped() -> None:
    """A run not nested in the followed one starts anew unmarked; control characters in a call id are escaped."""
    assert nesting_mark("a/b/c", "a") == "  [b/c] "
    assert nesting_mark("ab/c", "a") == "" and nesting_mark("a", "a") == "" and nesting_mark("a/b", None) == ""
    assert nesting_mark("a/\x1b[2J", "a") == "[\\x1b[2J] "
    follower_lines: list[str] = []
    follower = Follower(follower_lines.append)
    desk_agent(cents=100).run("refund A1", on_event=follower, run_id="one")
    before = len(follower_lines)
    desk_agent(cents=100).run("refund A1", on_event=follower, run_id="two")
    second = "".join(follower_lines[before:]).splitlines()
    assert second[0] == "state   | Ready --next_turn--> Proposing"  # the new run is followed from the top
    assert any("| [d1] " in line for line in second)
    events: list = []
    desk_agent(cents=100).run("refund A1", on_event=events.append, run_id="three")
    nested = [e for e in events if e.run_id != "three"]
    assert nested and all("[" not in (event_line(e) or "").split("| ", 1)[1][:1] for e in nested)  # no top: unmarked
    assert all((event_line(e, top="three") or "").split("| ", 1)[1].startswith(("[d1", "  [d1")) for e in nested)
