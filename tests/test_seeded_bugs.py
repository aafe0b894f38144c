"""
Seeded bugs in users' worlds (tests/worlds/): the kit finds each at default settings, with a readable counterexample.

Every world's gate carries one bug a reviewer could miss: an off-by-one
behind a real weekday date, a date compared with ``<`` for ``<=``, a
cross-field sum, an optional field's default, a nested list, a string
length; and three whose constant lives only one level away from the gate's
own code: in a rule a gate factory closes over, in a module-level dict, and
in a sum over line items none of which can reach it alone. Each test runs
the kit as a user would, then re-judges the shrunk call itself: the policy
forbids it, the shipped gate allows it, the sound gate does not.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from agent_fsm import ToolCall, as_verdict
from agent_fsm.testing import InvariantViolation, check_gate_contains, default_settings, run_harness
from tests.worlds import booking, claims, expenses, notices, payments, refunds, shifts, shipping, venues

WORLDS: dict[str, tuple[ModuleType, Callable[[], Any]]] = {
    "booking": (booking, booking.make_world),
    "booking_format_date": (booking, functools.partial(booking.make_world, date_format=True)),
    "payments_dates": (payments, payments.make_world),
    "shifts_cross_field": (shifts, shifts.make_world),
    "refunds_optional_field": (refunds, refunds.make_world),
    "shipping_nested": (shipping, shipping.make_world),
    "notices_string_length": (notices, notices.make_world),
    "venues_closure": (venues, venues.make_world),
    "expenses_module_dict": (expenses, expenses.make_world),
    "claims_line_item_sum": (claims, claims.make_world),
}
ONE_LEVEL_AWAY = ["venues_closure", "expenses_module_dict", "claims_line_item_sum"]

# A ceiling against a kit that stops finding boundaries (the figures measured
# for the changelog are far below it); not the search budget, which stays Hypothesis's default.
CEILING_SECONDS = 60

# The checks' own defaults (the profile's max_examples and everything else),
# with a fixed seed: a search that misses a bug once in thirty random seeds
# must not make the suite flaky; the random-seed figures are measured apart.
DEFAULTS = default_settings(derandomize=True, database=None)


def _shrunk_call(failure: InvariantViolation) -> ToolCall:
    found = re.search(r"the gate let (\w+)\((\{.*\})\) through", failure.detail)
    assert found, failure.detail
    return ToolCall("shrunk", found.group(1), json.loads(found.group(2)))


def _assert_real_counterexample(world: ModuleType, failure: InvariantViolation) -> ToolCall:
    assert failure.invariant == "forbidden_effect"
    call = _shrunk_call(failure)
    assert world.forbidden(call)
    assert as_verdict(world.buggy_gate(call)).kind == "allow"
    assert as_verdict(world.sound_gate(call)).kind != "allow"
    return call


@pytest.mark.parametrize("name", list(WORLDS))
def test_check_gate_contains_finds_the_seeded_bug(name: str) -> None:
    """check_gate_contains at its defaults (seed fixed) finds the bug; the shrunk call is one the policy forbids."""
    world, factory = WORLDS[name]
    started = time.perf_counter()
    with pytest.raises(InvariantViolation) as caught:
        check_gate_contains(world.buggy_gate, factory, world.forbidden, settings=DEFAULTS)
    elapsed = time.perf_counter() - started
    call = _assert_real_counterexample(world, caught.value)
    assert elapsed < CEILING_SECONDS, f"{name}: found {call.arguments} only after {elapsed:.1f} s"


def test_booking_counterexample_is_a_real_weekday_and_three_hours() -> None:
    """The booking bug needs a real weekday date in ASCII digits and exactly 3 hours: the shrunk call has both."""
    with pytest.raises(InvariantViolation) as caught:
        check_gate_contains(booking.buggy_gate, booking.make_world, booking.forbidden, settings=DEFAULTS)
    call = _assert_real_counterexample(booking, caught.value)
    assert call.arguments is not None
    assert call.arguments["hours"] == 3
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", call.arguments["date"])


@pytest.mark.parametrize("name", list(WORLDS))
def test_sound_gate_passes(name: str) -> None:
    """The same policy written right passes the same check: the kit's finds are not false alarms."""
    world, factory = WORLDS[name]
    check_gate_contains(world.sound_gate, factory, world.forbidden, settings=settings(max_examples=25, database=None))


@pytest.mark.parametrize("name", list(WORLDS))
def test_stateful_harness_finds_the_seeded_bug(name: str) -> None:
    """
    The stateful harness, stepping one live run per example, finds the same bug
    (searching only: shrinking is what the next test and the measured figures cover).
    """
    world, factory = WORLDS[name]
    harness = run_harness(factory, gate=world.buggy_gate, forbidden=world.forbidden)
    with pytest.raises(InvariantViolation) as caught:
        run_state_machine_as_test(
            harness, settings=settings(harness.TestCase.settings, phases=[Phase.generate], derandomize=True)
        )
    _assert_real_counterexample(world, caught.value)


def test_stateful_harness_shrinks_the_booking_bug() -> None:
    """At the harness's own settings the booking bug shrinks to one readable step: 3 hours on a weekday."""
    harness = run_harness(booking.make_world, gate=booking.buggy_gate, forbidden=booking.forbidden)
    with pytest.raises(InvariantViolation) as caught:
        run_state_machine_as_test(harness, settings=settings(harness.TestCase.settings, derandomize=True))
    call = _assert_real_counterexample(booking, caught.value)
    assert call.arguments is not None and call.arguments["hours"] == 3


@pytest.mark.parametrize("name", ONE_LEVEL_AWAY)
def test_random_search_alone_finds_the_constant_one_level_away(name: str) -> None:
    """
    With the enumeration turned off, the random search still finds each bug
    (fixed seed): the constants reach the arguments, and line items add up to them.
    """
    world, factory = WORLDS[name]
    with pytest.raises(InvariantViolation) as caught:
        check_gate_contains(world.buggy_gate, factory, world.forbidden, settings=DEFAULTS, exhaustive=False)
    _assert_real_counterexample(world, caught.value)


@pytest.mark.parametrize("name", ONE_LEVEL_AWAY)
def test_enumeration_finds_the_constant_one_level_away_before_any_random_search(name: str) -> None:
    """The enumerated contract holds the counterexample: found with no random example at all, in well under a second."""
    world, factory = WORLDS[name]
    started = time.perf_counter()
    with pytest.raises(InvariantViolation) as caught:
        check_gate_contains(world.buggy_gate, factory, world.forbidden, settings=settings(DEFAULTS, max_examples=1))
    assert "found by enumerating" in "\n".join(getattr(caught.value, "__notes__", []))
    _assert_real_counterexample(world, caught.value)
    assert time.perf_counter() - started < 5
