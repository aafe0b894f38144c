"""Raw ``transitions``: one stock ``Machine`` built once; each run is a plain record passed to the events."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from ..record import Record
from ..scenarios import Job, Outcome

_ENDINGS = {
    "Answered": "answered",
    "StepLimit": "step_limit",
    "TokenLimit": "token_limit",
    "NoProgress": "no_progress",
    "ToolLimit": "tool_limit",
    "AwaitingApproval": "awaiting_approval",
}
_AUTO = {"Ready": "next_turn", "Proposing": "judge", "Executing": "observe", "Denied": "observe"}


@cache
def _transitions_machine() -> Any:
    from transitions import Machine, State

    def ending(stop: str) -> Callable[[Record], None]:
        def enter(record: Record) -> None:
            record.finish(stop)

        return enter

    states = [
        State("Ready"),
        State("Proposing", on_enter=[Record.take_proposal]),
        State("Executing", on_enter=[Record.execute_call]),
        State("Denied", on_enter=[Record.record_rejection]),
        *(State(name, on_enter=[ending(stop)]) for name, stop in _ENDINGS.items()),
    ]
    edges = [
        ("next_turn", "Ready", "StepLimit", Record.turn_budget_spent),
        ("next_turn", "Ready", "TokenLimit", Record.prompt_over_budget),
        ("next_turn", "Ready", "Proposing", None),
        ("judge", "Proposing", "Answered", Record.reply_has_no_calls),
        ("judge", "Proposing", "ToolLimit", Record.tool_budget_spent),
        ("judge", "Proposing", "Denied", Record.call_rejected),
        ("judge", "Proposing", "AwaitingApproval", Record.approval_needed),
        ("judge", "Proposing", "Executing", Record.call_allowed),
        ("observe", "Executing", "Proposing", Record.calls_pending),
        ("observe", "Executing", "Ready", None),
        ("observe", "Denied", "NoProgress", Record.denial_repeated),
        ("observe", "Denied", "Proposing", Record.calls_pending),
        ("observe", "Denied", "Ready", None),
    ]
    return Machine(
        model=None,  # runs are passed to each event, never attached
        states=states,
        transitions=[{"trigger": t, "source": s, "dest": d, "conditions": [g] if g else []} for t, s, d, g in edges],
        initial="Ready",
        auto_transitions=False,
        send_event=False,  # guards and effects receive the record, the trigger's one argument
        model_attribute="machine_state",
        ignore_invalid_triggers=False,
        queued=False,
    )


def run_transitions(job: Job) -> Outcome:
    events = _transitions_machine().events
    record = Record(job)
    while (event := _AUTO.get(record.machine_state)) is not None:
        if not events[event].trigger(record, record):
            raise RuntimeError(f"no edge for {event} from {record.machine_state}")
    return record.outcome()
