"""
Sessions: a conversation continued across runs, each run of it an ordinary stored run.

    chat = Session(store, agent, "ticket-42")
    chat.run("My refund has not arrived.")
    chat.run("It was order 1234.")          # the model sees the first exchange too

A session keeps nothing of its own: its runs are named ``<session>~1``,
``<session>~2``, ... in the store, and the history a new run starts from is
the transcript of the last one (its system prompt left out: the agent
supplies its own). So every run of a session is decided once, recovered,
forked and listed like any other, and two processes continuing one session
cannot both begin the same next run (the store refuses a taken id).
"""

from __future__ import annotations

from typing import Any

import attrs

from agent_fsm import Agent
from agent_fsm.engine import RunResult
from agent_fsm.store.protocol import RunStore

__all__ = ["SEPARATOR", "Session", "SessionBusy"]

SEPARATOR = "~"
"""Between a session's id and the number of each of its runs."""


class SessionBusy(ValueError):
    """The session's last run is not at rest (running, paused or failed): a new task would split the conversation."""


@attrs.frozen
class Session:
    """The conversation ``session_id`` of ``agent``, kept in ``store``."""

    store: RunStore
    agent: Agent
    session_id: str = attrs.field(validator=attrs.validators.matches_re(r"[A-Za-z0-9._@-]{1,200}"))

    def run_ids(self) -> list[str]:
        """The session's runs, oldest first."""
        prefix = f"{self.session_id}{SEPARATOR}"
        numbered = []
        for summary in self.store.runs():
            number = summary.run_id.removeprefix(prefix)
            if summary.run_id.startswith(prefix) and number.isdigit():
                numbered.append((int(number), summary.run_id))
        return [run_id for _, run_id in sorted(numbered)]

    def next_run(self) -> tuple[str, list[dict[str, Any]]]:
        """
        The id the next run takes and the history it starts from (the last run's transcript).

        Raises:
            SessionBusy: the last run is running, paused or failed.
        """
        runs = self.run_ids()
        if not runs:
            return f"{self.session_id}{SEPARATOR}1", []
        last = self.store.load(runs[-1])
        if last.status != "ended":
            raise SessionBusy(
                f"session {self.session_id!r}: run {runs[-1]!r} is {last.status}; decide or recover it first"
            )
        history = [dict(m) for m in last.state.messages if m.get("role") != "system"]
        return f"{self.session_id}{SEPARATOR}{len(runs) + 1}", history

    def run(self, task: str) -> RunResult:
        """Run ``task`` as the session's next run, continuing its conversation (a :class:`RunResult` as ever)."""
        run_id, history = self.next_run()
        return self.agent.run(task, history=history, store=self.store, run_id=run_id)
