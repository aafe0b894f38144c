"""
The handoff controller on its own: finish, continue or hand off, and a replay of a host loop over events.

:func:`decide` judges from attempts so far, their cap and how the latest
went; :func:`replay` plays the host loop over a supplied list of events and
reports why it ended (a :class:`HandoffEnding`, whose values are also the codes of
the engine world in :mod:`agent_fsm.examples.handoff`) and how many tool
attempts were made.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

__all__ = ["STATUSES", "HandoffEnding", "Event", "Replay", "decide", "replay"]

Action = Literal["finish", "tool"]
Decision = Literal["answer", "continue", "handoff"]
STATUSES = ("ok", "transient", "permanent", "schema", "denied")
"""How a tool call can come back."""


class HandoffEnding(str, enum.Enum):
    """Why a replayed run ended; one completed flag would lose these distinctions."""

    ANSWERED = "answered"  # a checked answer backed by evidence
    MISSING_EVIDENCE = "missing_evidence"  # an honest answer that the sources did not settle the question
    DENIED_ACTION = "denied_action"  # the last tool call was refused by policy
    INVALID_ACTION = "invalid_action"  # the last tool call broke its schema
    EXHAUSTED_BUDGET = "exhausted_budget"  # another tool was wanted with every attempt spent
    SERVICE_FAILURE = "service_failure"  # the tool service failed (timed out, or permanently)
    UNSUPPORTED_CLAIM = "unsupported_claim"  # the answer states what no source read supports (refused)

    def __str__(self) -> str:
        return self.value


def decide(action: Action, used: int, limit: int, status: str) -> Decision:
    """
    Apply the controller's rule, checked in a fixed order: a finish becomes the
    answer; a tool call goes ahead only while ``used < limit`` and the previous
    ``status`` was ``ok``; every other case goes to a person.

    Checking the finish first means an answer still counts right after the
    final permitted attempt, while a model that claims to be almost done never
    earns one more tool call by saying so.

    Raises:
        ValueError: ``action`` is not ``finish`` or ``tool``, or ``status`` is unknown.
    """
    if status not in STATUSES:
        raise ValueError(f"status must be one of {list(STATUSES)}, got {status!r}")
    if action == "finish":
        return "answer"
    if action != "tool":
        raise ValueError(f"action must be 'finish' or 'tool', got {action!r}")
    if used < limit and status == "ok":
        return "continue"
    return "handoff"


@attrs.frozen
class Event:
    """
    One proposal in a replay, with what came of it.

    ``action="tool"`` carries the ``status`` its call came back with;
    ``action="finish"`` carries whether the answer had ``evidence``.
    """

    action: Action = attrs.field(validator=attrs.validators.in_(("finish", "tool")))
    status: str = attrs.field(default="ok", validator=attrs.validators.in_(STATUSES))
    evidence: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | str) -> Event:
        """``"finish"``, ``{"action": "tool", "status": "transient"}`` and the like; ValueError otherwise."""
        if isinstance(data, str):
            data = {"action": data}
        if not isinstance(data, Mapping):
            raise ValueError(f"an event is a mapping or 'finish'/'tool', got {data!r}")
        unknown = sorted(set(data) - {"action", "status", "evidence"})
        if unknown:
            raise ValueError(f"unknown event keys {unknown}; expected action, status, evidence")
        try:
            return cls(**data)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bad event {dict(data)!r}: {exc}") from exc


@attrs.frozen
class Replay:
    """How a replay ended, the tool attempts it made, and the decision taken at each event."""

    ending: HandoffEnding
    attempts: int
    decisions: tuple[Decision, ...]


def _handoff_reason(used: int, limit: int, status: str) -> HandoffEnding:
    if status == "denied":
        return HandoffEnding.DENIED_ACTION
    if status == "schema":
        return HandoffEnding.INVALID_ACTION
    if status in ("transient", "permanent"):
        return HandoffEnding.SERVICE_FAILURE
    assert used >= limit, "decide() hands off an ok status only at the limit"
    return HandoffEnding.EXHAUSTED_BUDGET


def replay(
    events: Iterable[Event | Mapping[str, Any] | str],
    *,
    limit: int,
    policy: Literal["immediate", "deferred"] = "immediate",
) -> Replay:
    """
    Play the host loop over ``events``: ask :func:`decide` before each one.

    Attempts are counted when a call is issued, failed ones included, so an
    unreliable tool cannot be retried for ever. With ``policy="immediate"`` a
    ``permanent`` failure hands off as soon as it arrives, before another
    proposal is read; with ``"deferred"`` it only stops further tools, and a
    prepared final answer may still follow. Neither runs another tool after it.

    Raises:
        ValueError: a malformed event, a negative limit, an unknown policy, or
            events that run out before the loop ends.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be a non-negative integer, got {limit!r}")
    if policy not in ("immediate", "deferred"):
        raise ValueError(f"policy must be 'immediate' or 'deferred', got {policy!r}")
    used, status = 0, "ok"
    decisions: list[Decision] = []
    for raw in events:
        event = raw if isinstance(raw, Event) else Event.from_data(raw)
        decision = decide(event.action, used, limit, status)
        decisions.append(decision)
        if decision == "answer":
            ending = HandoffEnding.ANSWERED if event.evidence else HandoffEnding.MISSING_EVIDENCE
            return Replay(ending, used, tuple(decisions))
        if decision == "handoff":
            return Replay(_handoff_reason(used, limit, status), used, tuple(decisions))
        used += 1  # counted when issued, before its outcome is known
        status = event.status
        if status == "permanent" and policy == "immediate":
            decisions.append("handoff")
            return Replay(HandoffEnding.SERVICE_FAILURE, used, tuple(decisions))
    raise ValueError(f"the events ran out after {used} tool attempts before the controller ended the run")
