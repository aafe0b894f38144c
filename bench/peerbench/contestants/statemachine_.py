"""python-statemachine: a ``StateMachine`` class with ``cond=`` guards; one instance per run, the run its model."""

from __future__ import annotations

from functools import cache
from typing import Any

from ..record import Record
from ..scenarios import Job, Outcome

_PSM_AUTO = {"ready": "next_turn", "proposing": "judge", "executing": "observe", "denied": "observe"}


@cache
def _statemachine_class() -> Any:
    from statemachine import State, StateMachine

    class RunChart(StateMachine):
        """The run machine; one instance per run, the record as its model."""

        model: Record

        ready = State(initial=True)
        proposing = State()
        executing = State()
        denied = State()
        answered = State(final=True)
        step_limit = State(final=True)
        token_limit = State(final=True)
        no_progress = State(final=True)
        tool_limit = State(final=True)
        awaiting_approval = State(final=True)

        next_turn = (
            ready.to(step_limit, cond="turn_budget_spent")
            | ready.to(token_limit, cond="prompt_over_budget")
            | ready.to(proposing)
        )
        judge = (
            proposing.to(answered, cond="reply_has_no_calls")
            | proposing.to(tool_limit, cond="tool_budget_spent")
            | proposing.to(denied, cond="call_rejected")
            | proposing.to(awaiting_approval, cond="approval_needed")
            | proposing.to(executing, cond="call_allowed")
        )
        observe = (
            executing.to(proposing, cond="calls_pending")
            | executing.to(ready)
            | denied.to(no_progress, cond="denial_repeated")
            | denied.to(proposing, cond="calls_pending")
            | denied.to(ready)
        )

        def turn_budget_spent(self) -> bool:
            return self.model.turn_budget_spent()

        def prompt_over_budget(self) -> bool:
            return self.model.prompt_over_budget()

        def reply_has_no_calls(self) -> bool:
            return self.model.reply_has_no_calls()

        def tool_budget_spent(self) -> bool:
            return self.model.tool_budget_spent()

        def call_rejected(self) -> bool:
            return self.model.call_rejected()

        def approval_needed(self) -> bool:
            return self.model.approval_needed()

        def call_allowed(self) -> bool:
            return self.model.call_allowed()

        def calls_pending(self) -> bool:
            return self.model.calls_pending()

        def denial_repeated(self) -> bool:
            return self.model.denial_repeated()

        def on_enter_proposing(self) -> None:
            self.model.take_proposal()

        def on_enter_executing(self) -> None:
            self.model.execute_call()

        def on_enter_denied(self) -> None:
            self.model.record_rejection()

        def on_enter_answered(self) -> None:
            self.model.finish("answered")

        def on_enter_step_limit(self) -> None:
            self.model.finish("step_limit")

        def on_enter_token_limit(self) -> None:
            self.model.finish("token_limit")

        def on_enter_no_progress(self) -> None:
            self.model.finish("no_progress")

        def on_enter_tool_limit(self) -> None:
            self.model.finish("tool_limit")

        def on_enter_awaiting_approval(self) -> None:
            self.model.finish("awaiting_approval")

    return RunChart


def run_statemachine(job: Job) -> Outcome:
    record = Record(job)
    chart = _statemachine_class()(model=record)
    while (event := _PSM_AUTO.get(record.state)) is not None:
        chart.send(event)
    return record.outcome()
