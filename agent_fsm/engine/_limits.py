"""
Budgets, and the fixed set of typed reasons a run ends.
"""

from __future__ import annotations

import enum
import math
from typing import Any

import attrs
from attrs import validators as v

from agent_fsm.engine._json import DEPTH_CEILING

__all__ = ["DEFAULT_LIMITS", "Limits", "Stop"]


# --- limits ---


class Stop(str, enum.Enum):
    """
    Why a run stopped. Callers branch on these, never on prose.

    Every member except ``AWAITING_APPROVAL`` is absorbing: nothing moves the
    run on. ``AWAITING_APPROVAL`` is a pause that :func:`agent_fsm.resume` ends.
    """

    ANSWERED = "answered"  # the model answered (and the answer check, if any, accepted it)
    # the model answered and the answer check refused it, or the reply was no answer
    # (cut off at the token limit, a refusal, withheld by a content filter; see RunState.finish)
    ANSWER_REJECTED = "answer_rejected"
    STEP_LIMIT = "step_limit"  # max_turns model calls were spent
    TOKEN_LIMIT = "token_limit"  # the next prompt would exceed max_prompt_tokens
    NO_PROGRESS = "no_progress"  # the same rejected proposal came back repeated_denials times
    TOOL_LIMIT = "tool_limit"  # max_tool_calls handler attempts were spent and another was proposed
    HANDOFF = "handoff"  # a tool failed permanently; no further tool runs, a person takes over
    AWAITING_APPROVAL = "awaiting_approval"  # the gate asked a human; resume() continues
    PROVIDER_ERROR = "provider_error"  # the model could not be reached; no answer is made up
    TIME_LIMIT = "time_limit"  # the max_seconds time budget was spent before more work could be admitted
    REFUSED = "refused"  # the input screen refused the task; no model call was made
    INTERCEPTED = "intercepted"  # a result screen stopped the run before the model read an observation
    TOOL_ENDED = "tool_ended"  # a tool declared to end the run (ends_run) returned a result

    def __str__(self) -> str:
        return self.value


def _whole_number(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # bool is an int subclass; Limits(max_turns=True) is a mistake, not one turn.
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"'{attribute.name}' must be an int (got {value!r} that is a {type(value).__name__}).")


_non_negative = [_whole_number, v.ge(0)]


def _seconds(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise ValueError(f"'{attribute.name}' must be a number of seconds > 0 (got {value!r}).")


@attrs.frozen
class Limits:
    """
    Ceilings the engine enforces whatever the model wants.

    Budgets are checked *before* admitting work: no model call once
    ``max_turns`` calls were made or once the next prompt is estimated above
    ``max_prompt_tokens``; no handler call once ``max_tool_calls`` attempts
    (failed ones included) were made. ``repeated_denials`` is how many times
    the identical rejected proposal may come back before the run ends
    ``no_progress``. ``accept_truncated=True`` accepts an answer the
    provider cut off at its output token limit (``finish == "length"``);
    by default such a reply ends ``answer_rejected``. A call from a cut-off
    reply is never executed either way. Arguments nested deeper than
    ``max_argument_depth`` or longer than ``max_argument_chars`` characters
    of JSON are ``invalid`` (see docs/hostile-input.md).
    ``oscillation`` is how many consecutive rejections may alternate between
    two proposals (A, B, A, B ...) before the run ends ``no_progress`` too.
    ``max_seconds`` is a wall-clock budget for the time the run spends in
    the drivers (a pause for a human does not count): checked before every
    model call and every tool call is admitted, it ends the run
    ``time_limit``; the async driver also cuts a model call in flight off at
    the time left (the sync driver cannot interrupt a call).
    ``output_retries`` is how many times a final answer that is not valid
    typed output (``output=``) goes back to the model as ``invalid`` before
    the run ends ``answer_rejected`` with the code ``output_invalid``.
    """

    max_turns: int = attrs.field(default=8, validator=_non_negative)
    max_prompt_tokens: int = attrs.field(default=4000, validator=_non_negative)
    repeated_denials: int = attrs.field(default=2, validator=[_whole_number, v.ge(1)])
    max_tool_calls: int | None = attrs.field(default=None, validator=v.optional(_non_negative))
    accept_truncated: bool = attrs.field(default=False, validator=v.instance_of(bool))
    # Hostile arguments: how deep dicts and lists may nest, and how long their JSON text may be.
    # Past DEPTH_CEILING a value could not be saved, so no setting goes beyond it.
    max_argument_depth: int = attrs.field(default=32, validator=[_whole_number, v.ge(1), v.le(DEPTH_CEILING)])
    max_argument_chars: int = attrs.field(default=100_000, validator=[_whole_number, v.ge(2)])
    oscillation: int = attrs.field(default=4, validator=[_whole_number, v.ge(3)])
    max_seconds: float | None = attrs.field(default=None, validator=v.optional(_seconds))
    output_retries: int = attrs.field(default=2, validator=_non_negative)


DEFAULT_LIMITS = Limits()
"""The budgets of a run given none: one shared frozen value."""
