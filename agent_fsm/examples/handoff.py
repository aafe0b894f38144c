"""
A handoff controller: after each tool reply, finish, continue, or hand the work to a person.

A maintenance assistant looks up how often pump PX-200 (asset P-7) must be
inspected. Manuals can be out of date, searches can time out, some manuals
are restricted, and booking an inspection moves a technician's day. The
module has two halves that share one vocabulary:

* the controller on its own (:mod:`agent_fsm.examples.handoff_replay`,
  re-exported here): :func:`decide` (finish, continue or handoff,
  judged from attempts so far, their cap and how the latest went) and
  :func:`replay`, which plays a host loop over a supplied list of events and
  reports why it ended and how many tool attempts were made;
* the same world as an engine environment (:func:`environment`), whose
  scenario specs end for each of the reasons the controller distinguishes.

Each ending of the engine world carries the controller's code
(``RunResult.code``, the values of :class:`HandoffEnding`): the answer check names
``missing_evidence`` and ``unsupported_claim``, and :func:`ending_code` names
``denied_action``, ``invalid_action``, ``exhausted_budget`` and
``service_failure`` from the typed stop and the last observation's kind.
:func:`handoff_message` is what the technician reads when the loop cannot
go on: what is unresolved, which sources were checked, what would resume it.

Error results stay distinct: ``transient`` (a timeout; the call may be
retried), ``permanent`` (a permission the service will never grant; ends the
run ``handoff``), ``schema`` (the arguments broke the contract; they may be
corrected) and ``denied`` (the policy refused the action).
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent_fsm.engine import Ending as CodedEnding
from agent_fsm.engine import (
    ProviderFailure,
    RunResult,
    RunState,
    Stop,
    ToolCall,
    ToolError,
    ToolSpec,
    Verdict,
    parse_tool_calls,
)
from agent_fsm.examples.handoff_replay import STATUSES, Event, HandoffEnding, Replay, decide, replay
from agent_fsm.scenarios.environment import Environment

__all__ = [
    "INTERVAL_DAYS",
    "STATUSES",
    "HandoffEnding",
    "Event",
    "Replay",
    "decide",
    "ending_code",
    "environment",
    "flaky_environment",
    "handoff_message",
    "replay",
]

# --- the same world as an engine environment -------------------------------------

INTERVAL_DAYS = 180
"""The PX-200 inspection interval, as its own manual states it."""

SYSTEM_PROMPT = (
    "You help a maintenance technician. Answer only from manuals you have read in this conversation, "
    "and cite the manual id. If the manuals do not settle the question, say so and say what would."
)

_MANUALS: dict[str, dict[str, Any]] = {
    "M-100": {"manual_id": "M-100", "model": "PX-100", "text": "PX-100 pumps: inspect seals every 90 days."},
    "M-200": {
        "manual_id": "M-200",
        "model": "PX-200",
        "text": f"PX-200 pumps: inspect seals every {INTERVAL_DAYS} days.",
        "inspection_interval_days": INTERVAL_DAYS,
    },
}
_RESTRICTED = {"M-300": "the vendor"}


def _tools(effects: list[dict[str, Any]], *, flaky: bool) -> dict[str, ToolSpec]:
    searches = {"count": 0}

    def search_manuals(query: str) -> list[dict[str, str]]:
        searches["count"] += 1
        if flaky and searches["count"] == 1:
            raise TimeoutError("the manual search did not answer within 5 s; nothing was changed, a retry is safe")
        if "PX-200" in query:
            return [
                {"manual_id": "M-200", "title": "PX-200 service manual"},
                {"manual_id": "M-300", "title": "PX-200 vendor addendum"},
            ]
        return [{"manual_id": "M-100", "title": "PX-100 service manual (older pump)"}]

    def read_manual(manual_id: str) -> dict[str, Any]:
        if manual_id in _RESTRICTED:
            message = f"permission denied: {manual_id} is restricted to {_RESTRICTED[manual_id]}"
            raise ToolError(message, data={"category": "permanent", "message": message}, permanent=True)
        if manual_id not in _MANUALS:
            raise KeyError(f"no manual {manual_id}")
        return dict(_MANUALS[manual_id])

    def schedule_inspection(asset_id: str, interval_days: int) -> dict[str, Any]:
        booking = {"asset_id": asset_id, "interval_days": interval_days}
        effects.append(booking)
        return booking

    return {
        "search_manuals": ToolSpec(
            "Search the manual library; returns manual ids and titles.", {"query": str}, search_manuals
        ),
        "read_manual": ToolSpec(
            "Read one manual by id.",
            {
                "type": "object",
                "properties": {"manual_id": {"type": "string", "pattern": "^M-[0-9]+$"}},
                "required": ["manual_id"],
                "additionalProperties": False,
            },
            read_manual,
        ),
        "schedule_inspection": ToolSpec(
            "Book recurring inspections for an asset. Commits a technician's time.",
            {
                "type": "object",
                "properties": {
                    "asset_id": {"type": "string"},
                    "interval_days": {"type": "integer", "minimum": 1, "maximum": 365},
                },
                "required": ["asset_id", "interval_days"],
                "additionalProperties": False,
            },
            schedule_inspection,
            effectful=True,
        ),
    }


def _manuals_read(state: RunState) -> list[dict[str, Any]]:
    """Contents of every manual successfully read in this run."""
    calls = {c.call_id: c for m in state.messages for c in parse_tool_calls(m)}
    return [
        o.content
        for o in state.observations
        if o.ok and o.call_id in calls and calls[o.call_id].name == "read_manual" and isinstance(o.content, dict)
    ]


_INTERVAL = re.compile(r"every\s+(\d+)\s+days", re.IGNORECASE)


def check_answer(answer: str, state: RunState) -> CodedEnding | None:
    """
    Refuse an answer that states an interval no manual read in this run supports (``unsupported_claim``).

    An honest "the manuals do not settle it" states no interval: it stands as
    an answer, coded ``missing_evidence``, since that is not the question resolved.
    """
    stated = {int(n) for n in _INTERVAL.findall(answer)}
    supported = {int(n) for m in _manuals_read(state) for n in _INTERVAL.findall(m.get("text", ""))}
    unsupported = sorted(stated - supported)
    if unsupported:
        return CodedEnding(
            HandoffEnding.UNSUPPORTED_CLAIM.value,
            f"the answer states an interval of {unsupported[0]} days that no manual read in this run supports",
        )
    if not stated:
        return CodedEnding(HandoffEnding.MISSING_EVIDENCE.value, "the answer states no interval", accept=True)
    return None


_STOP_CODES = {
    Stop.TOOL_LIMIT: HandoffEnding.EXHAUSTED_BUDGET,
    Stop.STEP_LIMIT: HandoffEnding.EXHAUSTED_BUDGET,
    Stop.TOKEN_LIMIT: HandoffEnding.EXHAUSTED_BUDGET,
    Stop.HANDOFF: HandoffEnding.SERVICE_FAILURE,
}


def ending_code(stop: Stop, state: RunState) -> str | None:
    """
    The controller's code for an engine stop, read from typed data only.

    A refusal that came back (``no_progress``) is ``denied_action`` or
    ``invalid_action`` by the kind of the last observation; a budget is
    ``exhausted_budget``; a permanent tool failure is ``service_failure``.
    """
    if stop is Stop.NO_PROGRESS and state.observations:
        return str(
            HandoffEnding.DENIED_ACTION if state.observations[-1].kind == "denied" else HandoffEnding.INVALID_ACTION
        )
    code = _STOP_CODES.get(stop)
    return None if code is None else str(code)


def _sources_checked(state: RunState) -> list[str]:
    """Every manual the run tried to read, in order, with how it went (``M-300: permission denied ...``)."""
    calls = {c.call_id: c for m in state.messages for c in parse_tool_calls(m)}
    found: list[str] = []
    for observation in state.observations:
        call = calls.get(observation.call_id)
        if call is None or call.name != "read_manual" or not call.arguments:
            continue
        if observation.ok:
            found.append(f"{call.arguments.get('manual_id')} (read)")
        else:
            detail = observation.content if isinstance(observation.content, str) else observation.kind
            if isinstance(observation.content, dict):
                detail = observation.content.get("message", observation.kind)
            found.append(f"{call.arguments.get('manual_id')} ({observation.kind}: {detail})")
    return found


def handoff_message(result: RunResult) -> str:
    """
    What the technician is told when the run did not settle the question.

    It says how the run ended, what remains unresolved, every source checked
    (read or refused), and what would let the work resume; it never claims
    that an unconfirmed action succeeded.
    """
    sources = _sources_checked(result.state)
    checked = "; ".join(sources) if sources else "none"
    return (
        f"Handed to a person ({result.code}): the inspection interval of pump P-7 (PX-200) is not settled. "
        f"Sources checked: {checked}. "
        "To resume: the PX-200 service manual (M-200) or the vendor's stated interval."
    )


def _resolved(result: RunResult) -> bool:
    """The outcome check: the PX-200 interval was read from its own manual and stated in the answer."""
    answer = result.answer or ""
    read = any(m.get("model") == "PX-200" for m in _manuals_read(result.state))
    stated = {int(n) for n in _INTERVAL.findall(answer)}
    return read and stated == {INTERVAL_DAYS} and "M-200" in answer


def _review_gate(call: ToolCall) -> Verdict:
    """Bookings go to a person with the proposed action in view; reads run."""
    if call.name == "schedule_inspection":
        return Verdict.ask(
            f"book {json.dumps(call.arguments)}: a supervisor confirms the interval against the cited manual"
        )
    return Verdict.allow("read-only tool")


class _Unreachable:
    """A model whose provider never answers."""

    def chat(self, messages: Any, tools: Any = ()) -> Any:
        raise ProviderFailure("the model endpoint timed out after 30 s", kind="timeout")


def environment(*, flaky: bool = False) -> Environment:
    """
    A fresh manual library for scenario specs.

    Gates: ``review`` (bookings wait for a supervisor; reads run) and the
    built-in ones; with no gate, booking is refused. Models: ``unreachable``.
    Checks: ``question_resolved`` (the right manual was read and its interval
    answered, with the manual cited), ``inspection_booked`` (the effect log
    holds a booking). The answer check refuses an unsupported interval.
    """
    effects: list[dict[str, Any]] = []
    return Environment(
        tools=_tools(effects, flaky=flaky),
        effects=effects,
        gates={"review": _review_gate},
        models={"unreachable": _Unreachable},
        checks={
            "question_resolved": _resolved,
            "inspection_booked": lambda result: bool(effects),
            # A process check: the handoff message names every manual the run tried to read.
            "sources_listed": lambda result: (
                all(source.split(" ", 1)[0] in handoff_message(result) for source in _sources_checked(result.state))
                and bool(_sources_checked(result.state))
            ),
        },
        answer_check=check_answer,
        system_prompt=SYSTEM_PROMPT,
        endings=ending_code,
    )


def flaky_environment() -> Environment:
    """The same library whose search times out on its first call (a transient failure)."""
    return environment(flaky=True)
