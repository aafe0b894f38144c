"""
One budget for a whole eval: turns, tokens and money summed over every run are never passed.

Rationale: a run's ``max_cost`` is a guarantee because the engine checks the
worst case before each model call. Across runs the same holds if no run may
spend more than the budget has left: before a run starts, the ledger takes
out its *share* (the most the run may spend under its own limits) and bounds
the run's limits by what remains; when the run ends, the unspent part of the
share goes back. Shares of runs in flight are never counted twice, so the sum
of what every run spent is at most the budget, however many run at once.

A run's turns are bounded by ``max_turns``, its money by ``max_cost`` (the
engine's own check) and its tokens by ``max_turns`` times the largest prompt
plus the largest reply (``max_prompt_tokens + max_output_tokens``). Tokens
are the engine's estimates where a provider reports none, so the token
guarantee is as exact as those estimates; turns and money are exact.

An LLM judge's call is spent from the same account: priced at its worst case
(the prompt estimate and its reply cap) and checked against what remains
before it is made, then charged what it spent, one turn each
(:meth:`Ledger.affords`, :meth:`Ledger.charge`).
"""

from __future__ import annotations

from decimal import Decimal

import attrs

from agent_fsm.engine import Limits, Usage

__all__ = ["BUDGET_SPENT", "EvalBudget", "Ledger", "Share"]

BUDGET_SPENT = "budget_spent"
"""``RunRecord.skipped`` of a run the shared budget could not fund: it was not started."""


def _optional_count(instance: object, attribute: attrs.Attribute[int | None], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise TypeError(f"'{attribute.name}' must be a whole number >= 0 or None (got {value!r})")


def _optional_money(instance: object, attribute: attrs.Attribute[Decimal | None], value: object) -> None:
    if value is not None and (not isinstance(value, Decimal) or not value.is_finite() or value < 0):
        raise TypeError(f"'{attribute.name}' must be a finite Decimal >= 0 or None (got {value!r})")


@attrs.frozen
class EvalBudget:
    """
    What the whole eval may spend, summed over every run: model calls, tokens, money (``None``: no ceiling).

    ``max_cost`` is in the currency of the agents' :class:`agent_fsm.Prices`;
    it needs every run to have ``max_output_tokens`` (as a run's own
    ``max_cost`` does), and a price table, else its cost could not be known.
    """

    max_turns: int | None = attrs.field(default=None, validator=_optional_count)
    max_tokens: int | None = attrs.field(default=None, validator=_optional_count)
    max_cost: Decimal | None = attrs.field(default=None, validator=_optional_money)


@attrs.frozen
class Share:
    """What one run was allowed: its bounded limits and the turns, tokens and money taken out for it."""

    limits: Limits
    turns: int
    tokens: int
    cost: Decimal


def _tokens_per_turn(limits: Limits) -> int:
    return limits.max_prompt_tokens + (limits.max_output_tokens or 0)


@attrs.define
class Ledger:
    """
    The eval's account: what remains, and the shares out to runs in flight.

    Not thread-safe by itself: the runner calls it from one event loop.
    """

    budget: EvalBudget
    spent: Usage = attrs.field(factory=Usage)
    turns_spent: int = 0
    out: list[Share] = attrs.field(factory=list)
    judge_cost: Decimal = Decimal(0)

    def _remaining(self) -> tuple[int | None, int | None, Decimal | None]:
        b = self.budget
        turns = None if b.max_turns is None else b.max_turns - self.turns_spent - sum(s.turns for s in self.out)
        tokens = None if b.max_tokens is None else b.max_tokens - self.spent.tokens - sum(s.tokens for s in self.out)
        cost = (
            None if b.max_cost is None else b.max_cost - self.spent.cost - sum((s.cost for s in self.out), Decimal(0))
        )
        return turns, tokens, cost

    def bounded(self, limits: Limits, floor: Decimal = Decimal(0)) -> Limits | None:
        """
        ``limits`` cut to what remains (fewer turns, a smaller ``max_cost``), or ``None`` when no turn can be funded.

        ``floor`` is the least a first model call may cost (its reply cap at
        the cheapest output price): money below it could not pay for one call.

        Raises:
            ValueError: the budget has a money or token ceiling and ``limits``
                has no ``max_output_tokens`` (a reply's size would be unbounded).
        """
        turns, tokens, cost = self._remaining()
        if (cost is not None or tokens is not None) and limits.max_output_tokens is None:
            raise ValueError(
                "an eval budget on money or tokens needs max_output_tokens in every case's limits:"
                " without it a run's spending is unbounded, so no share can be set aside for it"
            )
        max_turns = limits.max_turns
        if turns is not None:
            max_turns = min(max_turns, turns)
        if tokens is not None:
            max_turns = min(max_turns, tokens // max(_tokens_per_turn(limits), 1))
        max_cost = limits.max_cost
        if cost is not None:
            max_cost = cost if max_cost is None else min(max_cost, cost)
            if max_cost <= 0 or max_cost < floor:
                return None
        if max_turns < 1:
            return None
        return attrs.evolve(limits, max_turns=max_turns, max_cost=max_cost)

    def take(self, limits: Limits, floor: Decimal = Decimal(0)) -> Share | None:
        """Set aside the share of a run under ``limits`` (already bounded); ``None`` if it cannot be funded whole."""
        if self.bounded(limits, floor) != limits:
            return None
        share = Share(
            limits=limits,
            turns=limits.max_turns,
            tokens=limits.max_turns * _tokens_per_turn(limits),
            cost=limits.max_cost if limits.max_cost is not None and self.budget.max_cost is not None else Decimal(0),
        )
        self.out.append(share)
        return share

    def settle(self, share: Share, turns: int, usage: Usage) -> None:
        """A run ended: charge what it spent, return the rest of its share."""
        self.out.remove(share)
        self.turns_spent += turns
        self._add(usage)

    def affords(self, tokens: int, cost: Decimal) -> bool:
        """Whether one model call outside the runs (a judge's) of at most ``tokens`` and ``cost`` fits what remains."""
        turns, left_tokens, left_cost = self._remaining()
        return (
            (turns is None or turns >= 1)
            and (left_tokens is None or left_tokens >= tokens)
            and (left_cost is None or left_cost >= cost)
        )

    def charge(self, usage: Usage) -> None:
        """A judge's call was made: one turn, its tokens and its money are spent."""
        self.turns_spent += 1
        self._add(usage)
        self.judge_cost += usage.cost

    def _add(self, usage: Usage) -> None:
        self.spent.input_tokens += usage.input_tokens
        self.spent.output_tokens += usage.output_tokens
        self.spent.cached_tokens += usage.cached_tokens
        self.spent.cost += usage.cost

    @property
    def in_flight(self) -> int:
        """How many runs hold a share now."""
        return len(self.out)
