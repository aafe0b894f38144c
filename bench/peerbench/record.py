"""A mutable run record, for the contestants whose frameworks hold a model object."""

from __future__ import annotations

from typing import Any

from agent_fsm import estimate_tokens

from .scenarios import DECLARATION_TOKENS, DECLARATIONS, Job, Outcome
from .work import (
    Call,
    CallIds,
    execute_call,
    fingerprint,
    judge_call,
    not_run,
    opening,
    parse_reply,
    tool_budget_spent,
    tool_message,
)


class Record:
    """One run in flight, for raw transitions, python-statemachine and pydantic-graph."""

    __slots__ = (
        "answer",
        "attempts",
        "denials",
        "ids",
        "job",
        "log",
        "machine_state",
        "messages",
        "observations",
        "pending",
        "state",
        "stop",
        "tokens",
        "turns",
        "verdict",
    )

    def __init__(self, job: Job) -> None:
        self.job = job
        self.messages, self.tokens = opening()
        self.observations: list[tuple[str, bool, str, Any]] = []
        self.log: list[int] = []
        self.turns = 0
        self.attempts = 0
        self.denials: dict[str, int] = {}
        self.pending: list[Call] = []
        self.verdict: tuple[str, str] | None = None
        self.answer: str | None = None
        self.stop: str | None = None
        self.ids = CallIds()
        self.machine_state = "Ready"  # raw transitions' model attribute
        self.state: Any = None  # python-statemachine's model attribute

    def outcome(self) -> Outcome:
        assert self.stop is not None, "the run has not ended"
        return Outcome(self.stop, self.answer, self.messages, self.observations, self.job.desk.effects, self.log)

    # guards: pure predicates over the record

    def turn_budget_spent(self) -> bool:
        return self.turns >= self.job.limits.max_turns

    def prompt_over_budget(self) -> bool:
        return self.tokens + DECLARATION_TOKENS > self.job.limits.max_prompt_tokens

    def reply_has_no_calls(self) -> bool:
        return not self.pending

    def tool_budget_spent(self) -> bool:
        return tool_budget_spent(self.attempts, self.job.limits)

    def call_rejected(self) -> bool:
        return self.verdict is not None and self.verdict[0] in ("invalid", "denied")

    def approval_needed(self) -> bool:
        return self.verdict is not None and self.verdict[0] == "ask"

    def call_allowed(self) -> bool:
        return self.verdict is not None and self.verdict[0] == "allow"

    def calls_pending(self) -> bool:
        return bool(self.pending)

    def denial_repeated(self) -> bool:
        threshold = self.job.limits.repeated_denials
        return any(count >= threshold for count in self.denials.values())

    def budget_stop(self) -> str | None:
        """The ending the budgets call for before another model turn, if any."""
        if self.turn_budget_spent():
            return "step_limit"
        if self.prompt_over_budget():
            return "token_limit"
        return None

    # effects

    def begin_turn(self) -> None:
        self.log.append(self.tokens + DECLARATION_TOKENS)
        self.turns += 1

    def take_reply(self, reply: Any) -> None:
        message, self.pending = parse_reply(reply, self.turns, self.ids)
        self.append(message)

    def append(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.tokens += estimate_tokens(message)

    def judge_head(self) -> None:
        """Judge the head proposal, unless the tool budget is spent (then ``verdict`` stays ``None``)."""
        self.verdict = None
        if self.pending and not self.tool_budget_spent():
            self.verdict = judge_call(self.pending[0], self.job.gate)

    def take_proposal(self) -> None:
        if not self.pending:
            self.begin_turn()
            self.take_reply(self.job.model.chat(self.messages, DECLARATIONS))
        self.judge_head()

    def observe(self, observation: tuple[str, bool, str, Any]) -> None:
        self.observations.append(observation)
        self.append(tool_message(observation))
        self.pending.pop(0)
        self.verdict = None

    def execute_call(self) -> None:
        self.attempts += 1
        self.observe(execute_call(self.pending[0], self.job.desk))

    def record_rejection(self) -> None:
        call = self.pending[0]
        assert self.verdict is not None
        key = fingerprint(call)
        self.denials[key] = self.denials.get(key, 0) + 1
        self.observe((call.call_id, False, self.verdict[0], self.verdict[1]))

    def finish(self, stop: str) -> str:
        """Enter the ending ``stop``: keep the answer, or answer the calls left unjudged."""
        self.stop = stop
        if stop == "answered":
            self.answer = self.messages[-1]["content"] or ""
        elif stop in ("no_progress", "tool_limit"):
            while self.pending:
                self.observe(not_run(self.pending[0], stop))
        return stop
