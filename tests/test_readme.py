"""The README's set-up commands and quickstart stay true, and it stays a front door."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks(language: str, section: str | None = None) -> list[str]:
    """The README's fenced code blocks in ``language``, in order (only under ``## section`` when given)."""
    text = README.read_text()
    if section is not None:
        text = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_quickstart_runs_as_written():
    """Every python block of the quickstart runs, in order, in one namespace, and its assertions hold."""
    namespace: dict = {}
    quickstart = blocks("python", "Quickstart")
    assert len(quickstart) >= 5
    for block in quickstart:
        exec(compile(block, str(README), "exec"), namespace)  # the README's own code, run as a user would
    assert namespace["paid"] == [("ACME", 9000), ("ACME", 7500)]  # the approved payment, then the nested one


def test_every_python_block_is_in_the_quickstart():
    """No python block lives outside the executed quickstart, so none can go stale unseen."""
    assert blocks("python") == blocks("python", "Quickstart")


def test_the_readme_stays_short_and_builds_on_agent():
    """A newcomer reads it in ten minutes: about 300 lines at most, the quickstart about 60 lines of code on Agent."""
    assert len(README.read_text().splitlines()) <= 300
    code = [line for block in blocks("python", "Quickstart") for line in block.splitlines() if line.strip()]
    assert len(code) <= 70
    assert "Agent(" in "\n".join(code) and ".resume(" in "\n".join(code)


def test_exactly_two_setup_commands():
    """The set-up section has one demo command and one test command."""
    setup = README.read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", setup, flags=re.S)
    assert len(commands) == 2
    assert "agent-fsm demo" in commands[0] and "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    """.ci/run's last command is the README's test command, verbatim."""
    test_command = re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S)[1].strip()
    ci = (README.parent / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == test_command


def test_demo_output_shown_in_the_readme_is_current(capsys):
    """The demo excerpt in the README matches what the demo prints now."""
    from agent_fsm.examples.demo import main

    assert main() == 0
    printed = capsys.readouterr().out
    excerpt = blocks("text")[0]
    for line in excerpt.strip().splitlines():
        if line.strip():
            assert line in printed, line
