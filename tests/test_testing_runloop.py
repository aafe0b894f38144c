"""The kit's checks for the run loop's options: parallel calls, a held answer, a rate limit."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from hypothesis import Phase, settings

from agent_fsm import Limits, RateLimit, ToolSpec, allow_all
from agent_fsm.testing import (
    InvariantViolation,
    assert_answer_held,
    assert_rate_kept,
    check_parallel_calls,
    most_in_window,
)
from tests.test_hold_answer import _typed_agent

FEW = settings(max_examples=60, deadline=None, database=None)
FOUND = settings(FEW, phases=[Phase.generate])  # a failure found is enough here: no minutes spent shrinking it


def _lookups() -> dict[str, ToolSpec]:
    """Two effect-free tools whose results depend only on their arguments."""
    return {
        "upper": ToolSpec("Upper-case a word.", {"word": str}, lambda word: word.upper()),
        "size": ToolSpec("Count letters.", {"word": str}, lambda word: len(word)),
    }


def _busy_desk() -> dict[str, ToolSpec]:
    """A tool that is not effect-free in truth: it reports how many calls of it are running as it starts."""
    lock = threading.Lock()
    running: list[str] = []

    def busy(word: str) -> int:
        with lock:
            seen = len(running)
            running.append(word)
        time.sleep(0.005)
        with lock:
            running.remove(word)
        return seen

    return {"busy": ToolSpec("How busy the desk is.", {"word": str}, busy)}


def test_tools_that_depend_only_on_their_arguments_pass() -> None:
    """Lookups whose results are their arguments' alone run together as one by one, whatever the script."""
    check_parallel_calls(_lookups, settings=FEW)


def test_a_tool_that_counts_its_calls_is_caught() -> None:
    """A load report marked effect-free reads otherwise when its calls overlap: the check names the difference."""
    with pytest.raises(InvariantViolation) as caught:
        check_parallel_calls(_busy_desk, gate=allow_all, limits=Limits(), settings=FOUND)
    assert caught.value.invariant == "parallel_equals_sequential"


def test_a_held_stream_passes_and_an_unheld_one_is_caught() -> None:
    """assert_answer_held accepts stream(hold_answer=True) and refuses the same run streamed without holding."""
    assert_answer_held(list(_typed_agent().stream("Where?", hold_answer=True)))
    with pytest.raises(InvariantViolation) as caught:
        assert_answer_held(list(_typed_agent().stream("Where?")))
    assert caught.value.invariant == "answer_held" and caught.value.where == "model call 1"


def test_reservations_keep_the_rate_and_a_burst_does_not() -> None:
    """Moments handed out by a RateLimit keep its rate; the same number of calls at once breaks it."""
    limit = RateLimit(requests_per_minute=60_000, burst=2)  # 1,000 a second
    now = time.monotonic()
    moments = [now + limit.reserve() for _ in range(300)]
    assert_rate_kept(moments, limit, window=0.05)
    assert most_in_window(moments, 0.05) <= 2 + 50
    with pytest.raises(InvariantViolation) as caught:
        assert_rate_kept([now] * 300, limit, window=0.05)
    assert caught.value.invariant == "rate_kept"


def test_parallel_call_messages_propose_several_valid_calls() -> None:
    """The strategy's messages propose two to four calls, each of a known tool with arguments its schema accepts."""
    from hypothesis import given

    from agent_fsm import validate_call
    from agent_fsm.engine import normalise_reply
    from agent_fsm.testing import parallel_call_messages

    tools = _lookups()

    @FEW
    @given(parallel_call_messages(tools))
    def check(message: dict[str, Any]) -> None:
        _, calls = normalise_reply(message, 1)
        assert 2 <= len(calls) <= 4
        assert all(validate_call(call, tools) is None for call in calls)

    check()
