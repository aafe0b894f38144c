"""Limits validate their values; Stop is a str enum."""

from __future__ import annotations

import pytest

from agent_fsm import Limits, Stop


def test_defaults():
    """The documented defaults."""
    assert Limits() == Limits(max_turns=8, max_prompt_tokens=4000, repeated_denials=2, max_tool_calls=None)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_turns": -1}, ValueError),
        ({"max_turns": True}, TypeError),
        ({"max_prompt_tokens": 1.5}, TypeError),
        ({"repeated_denials": 0}, ValueError),
        ({"max_tool_calls": -2}, ValueError),
        ({"max_tool_calls": "3"}, TypeError),
    ],
)
def test_bad_values_are_refused(kwargs, error):
    """Negative, fractional, boolean or textual budgets are refused with a typed error."""
    with pytest.raises(error):
        Limits(**kwargs)


def test_every_stop_value_is_its_name_in_lowercase():
    """Stop values are stable strings callers can store and compare."""
    assert {s.value for s in Stop} == {
        "answered",
        "answer_rejected",
        "step_limit",
        "token_limit",
        "no_progress",
        "tool_limit",
        "handoff",
        "awaiting_approval",
        "provider_error",
        "time_limit",
        "refused",
        "intercepted",
        "tool_ended",
        "cost_limit",
        "handed_over",
        "cancelled",
    }
    assert all(s.value == s.name.lower() for s in Stop)
