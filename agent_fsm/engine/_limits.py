"""
Budgets, and the fixed set of typed reasons a run ends; and the rate limits a model carries.
"""

from __future__ import annotations

import enum
import math
import threading
import time
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import attrs
from attrs import validators as v

from agent_fsm.engine._json import DEPTH_CEILING

__all__ = ["DEFAULT_LIMITS", "Limits", "Price", "Prices", "RateLimit", "Stop", "Usage"]


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
    COST_LIMIT = "cost_limit"  # the next model call's worst-case cost would take the run past max_cost
    HANDED_OVER = "handed_over"  # the agent handed the conversation to another agent, whose ending ended it
    CANCELLED = "cancelled"  # a person cancelled the run at a pause; the call it waited on did not run

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


def _money(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # A float is a rounding error waiting to happen in a budget: money is a Decimal.
    if value is None:
        return
    if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
        raise TypeError(
            f"'{attribute.name}' must be a finite Decimal >= 0, e.g. Decimal(\"0.50\") (got {value!r} that is a"
            f" {type(value).__name__})."
        )


def _cost_needs_cap(instance: Limits, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and instance.max_output_tokens is None:
        raise ValueError(
            "'max_cost' needs 'max_output_tokens': without an output cap a model call's worst-case cost is"
            " unbounded, so the budget could only be noticed after it was spent"
        )


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
    ``max_output_tokens`` caps the reply of each model call (adapters that
    take a cap are told it); ``max_cost`` is a money budget in the currency
    of the agent's :class:`Prices`: before each model call the worst case
    (the prompt estimate at the input price plus ``max_output_tokens`` at the
    output price) is checked against what is left, and a call that could
    pass the budget is not made: the run ends ``cost_limit``.
    ``repeated_results`` (``None``: off) is how many times the same allowed
    call (tool name and canonical arguments) may return the same result
    before the run ends ``no_progress`` with the code ``repeated_result``.
    ``wrap_up=True`` makes the last model call ``max_turns`` admits a
    wrap-up: no tools are offered and the model is told the budget is spent;
    its answer ends the run ``answered`` with the code ``wrap_up``, and a
    call it still proposes ends the run ``step_limit`` as without it. Under
    ``max_cost`` the call is a wrap-up as soon as the money left would not
    cover a normal call's worst case and, after it, the wrap-up's grown by
    the prompt's average growth (a call proposed there ends ``cost_limit``),
    and under ``max_seconds`` once less time is left than two turns at the
    run's pace so far (a call proposed there ends ``time_limit``).
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
    max_output_tokens: int | None = attrs.field(default=None, validator=v.optional([_whole_number, v.ge(1)]))
    max_cost: Decimal | None = attrs.field(default=None, validator=[_money, _cost_needs_cap])
    # Off by default: a polling tool's unchanged answer is not always a loop, and runs that ended by
    # their budgets keep ending so; 2 is the least that is a repeat.
    repeated_results: int | None = attrs.field(default=None, validator=v.optional([_whole_number, v.ge(2)]))
    # The last model call the turn budget admits is a wrap-up: no tools offered, the model told to answer now.
    wrap_up: bool = attrs.field(default=False, validator=v.instance_of(bool))


DEFAULT_LIMITS = Limits()
"""The budgets of a run given none: one shared frozen value."""


# --- cost ---

_MILLION = Decimal(1_000_000)


@attrs.frozen
class Price:
    """
    What one model's tokens cost, per million: input, output, and cached input (``None``: the input price).

    Raises:
        TypeError: a price is not a finite Decimal >= 0.
    """

    input: Decimal = attrs.field(validator=_money)
    output: Decimal = attrs.field(validator=_money)
    cached_input: Decimal | None = attrs.field(default=None, validator=_money)

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> Decimal:
        """The cost of one call: ``cached_tokens`` of the ``input_tokens`` at the cached price, the rest at full."""
        cached = min(cached_tokens, input_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        total = (input_tokens - cached) * self.input + cached * cached_price + output_tokens * self.output
        return total / _MILLION

    def worst_case(self, prompt_tokens: int, output_cap: int) -> Decimal:
        """The most a call may cost: the whole prompt at the dearer input price, the whole output cap spent."""
        dearer = self.input if self.cached_input is None else max(self.input, self.cached_input)
        return (prompt_tokens * dearer + output_cap * self.output) / _MILLION


def _price_table(value: Mapping[str, Price]) -> dict[str, Price]:
    table = dict(value)
    for name, price in table.items():
        if not isinstance(name, str) or not isinstance(price, Price):
            raise TypeError(f"Prices maps model names to Price values; got {name!r}: {price!r}")
    return table


@attrs.frozen
class Prices:
    """
    A price table the user supplies: :class:`Price` by model name, and a ``default`` for any other model.

    A call is priced by the model name its reply reports (``ModelReply.model``),
    else the ``model`` attribute of the model asked; a model with no price and
    no default cannot be priced, which is a set-up mistake and fails loudly.
    """

    models: Mapping[str, Price] = attrs.field(factory=dict, converter=_price_table, hash=False)
    default: Price | None = attrs.field(default=None, validator=v.optional(v.instance_of(Price)))

    def of(self, model: str | None) -> Price | None:
        """The price of ``model`` (its own, else the default; ``None``: it has none)."""
        found = self.models.get(model) if model is not None else None
        return found if found is not None else self.default


# Mutable, updated in place as each call is charged: a new record per model call would cost every run.
@attrs.define
class Usage:
    """
    What a run spent: tokens in (``cached_tokens`` of them served from a cache), tokens out, and money.

    Tokens are the provider's figures when it reports them, else the
    engine's estimates; ``cost`` is zero unless the agent has :class:`Prices`.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost: Decimal = Decimal(0)

    @property
    def tokens(self) -> int:
        """Tokens in and out."""
        return self.input_tokens + self.output_tokens


# --- rate limits ---
#
# Client-side rate limits: a token bucket a model carries, shared by every run and thread that uses the model.
#
# A provider limits requests and tokens per minute; many runs in one process
# (a server, an evaluation, the kit) would pass those limits together and
# meet 429s. A :class:`RateLimit` is handed to the model (``rate_limit=`` on
# the provider adapters, or a ``rate_limit`` attribute on any model): before
# each model call the run reserves a request and the tokens it may use, and
# waits, if it must, until the bucket admits them. The wait is a step of the
# run (a :class:`~agent_fsm.RateWaited` event, spent from its time budget).
#
# Rationale: a reservation is made under a lock and gives each call its own
# start time, never earlier than the previous reservation's, so callers
# racing from threads or tasks are spaced out as one queue would space them:
# no window ever holds more than the bucket's burst plus its rate times the
# window. Nothing waits while holding the lock, so the same object serves
# the sync and the async drivers.


class _Bucket:
    """One dimension (requests or tokens): ``rate`` units a second, ``burst`` units at once."""

    __slots__ = ("burst", "rate", "tat")

    def __init__(self, per_minute: float, burst: float) -> None:
        self.rate = per_minute / 60.0
        self.burst = burst
        self.tat = -math.inf  # when the bucket is next empty (the "theoretical arrival time")

    def earliest(self, amount: float, now: float) -> float:
        """The earliest moment from ``now`` at which ``amount`` fits in the bucket."""
        return max(now, self.tat + (amount - self.burst) / self.rate)

    def take(self, amount: float, at: float) -> None:
        self.tat = max(self.tat, at) + amount / self.rate


class RateLimit:
    """
    Requests and tokens per minute for one model (or one account), as token buckets.

    Args:
        requests_per_minute: model calls a minute (``None``: unlimited).
        tokens_per_minute: prompt plus output tokens a minute (``None``: unlimited); a call
            reserves its prompt estimate (and the run's ``max_output_tokens`` when set) and
            is charged the rest of what it used once it replied.
        burst: the calls that may start at once from a full bucket (default: one second's
            worth, at least 1); the tokens' burst is the same share of their minute.

    Share one instance between every model that spends the same provider limit.

    Raises:
        ValueError: no limit given, or a limit or burst that is not a positive number.
    """

    def __init__(
        self,
        *,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        burst: float | None = None,
    ) -> None:
        for name, value in (("requests_per_minute", requests_per_minute), ("tokens_per_minute", tokens_per_minute)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0):
                raise ValueError(f"{name} must be a positive number or None, got {value!r}")
        if requests_per_minute is None and tokens_per_minute is None:
            raise ValueError("a RateLimit needs requests_per_minute, tokens_per_minute or both")
        share = 1.0 / 60.0  # one second's worth
        if burst is not None:
            if isinstance(burst, bool) or not isinstance(burst, int | float) or not burst >= 1:
                raise ValueError(f"burst must be a number >= 1, got {burst!r}")
            share = burst / requests_per_minute if requests_per_minute is not None else share
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.burst = burst
        self._requests = (
            None
            if requests_per_minute is None
            else _Bucket(requests_per_minute, burst if burst is not None else max(1.0, requests_per_minute * share))
        )
        self._tokens = (
            None if tokens_per_minute is None else _Bucket(tokens_per_minute, max(1.0, tokens_per_minute * share))
        )
        self._last = -math.inf  # the latest start handed out: starts are given in the order they are asked for
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"RateLimit(requests_per_minute={self.requests_per_minute!r}, "
            f"tokens_per_minute={self.tokens_per_minute!r}, burst={self.burst!r})"
        )

    def reserve(self, tokens: int = 0) -> float:
        """
        Reserve one call using ``tokens``: the seconds to wait before making it (0.0: at once).

        The reservation stands whether or not the call is made: a caller that gives up spends it.
        """
        with self._lock:
            now = time.monotonic()
            start = max(now, self._last)
            requests, bucket = self._requests, self._tokens
            if requests is not None:
                start = max(start, requests.earliest(1, now))
            if bucket is not None:
                # A call bigger than the whole burst waits for an empty bucket, then goes.
                start = max(start, bucket.earliest(min(tokens, bucket.burst), now))
            if requests is not None:
                requests.take(1, start)
            if bucket is not None:
                bucket.take(tokens, start)
            self._last = start
            return start - now

    def charge(self, tokens: int) -> None:
        """Charge ``tokens`` a call used beyond what it reserved (a reply longer than foreseen)."""
        bucket = self._tokens
        if bucket is None or tokens <= 0:
            return
        with self._lock:
            bucket.take(tokens, time.monotonic())
