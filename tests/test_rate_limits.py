"""RateLimit: a token bucket a model carries; a wait is a run event, spent from the run's time budget."""

from __future__ import annotations

import asyncio
import threading
import time
import types
from typing import Any

import pytest

from agent_fsm import (
    Agent,
    Limits,
    RateLimit,
    RateWaited,
    ScriptedModel,
    ToolSpec,
    answer_message,
    tool_call_message,
)


def _limited(turns: list[dict[str, Any]], limit: RateLimit) -> ScriptedModel:
    """A scripted model carrying ``limit`` (any model may carry one as its ``rate_limit``)."""
    model = ScriptedModel(turns)
    model.rate_limit = limit  # type: ignore[attr-defined]
    return model


def _on_threads(work: Any, count: int) -> None:
    """Run ``work`` on ``count`` threads at once and wait for them all."""
    threads = [threading.Thread(target=work) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


TOOLS = {"look": ToolSpec("Look.", {"key": str}, lambda key: key)}
TWO_TURNS = [tool_call_message("c1", "look", {"key": "a"}), answer_message("done")]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs requests_per_minute, tokens_per_minute or both"),
        ({"requests_per_minute": 0}, "requests_per_minute must be a positive number"),
        ({"tokens_per_minute": -5}, "tokens_per_minute must be a positive number"),
        ({"requests_per_minute": True}, "requests_per_minute must be a positive number"),
        ({"requests_per_minute": 60, "burst": 0.5}, "burst must be a number >= 1"),
    ],
)
def test_a_limit_that_is_not_one_is_refused(options: dict[str, Any], message: str) -> None:
    """No limit, a non-positive rate or a burst under one call is a ValueError saying which."""
    with pytest.raises(ValueError, match=message):
        RateLimit(**options)


def test_reservations_from_many_threads_are_spaced_at_the_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """50 threads reserving at once get starts a rate's step apart after the burst: none shares a slot."""
    from agent_fsm.engine import _limits

    # The limiter's clock held still: the 50 reservations are made at one instant whatever the scheduler does
    # (on a loaded machine the threads reach the lock over tens of milliseconds, which would blur the steps).
    monkeypatch.setattr(_limits, "time", types.SimpleNamespace(monotonic=lambda: 1000.0))
    limit = RateLimit(requests_per_minute=6000, burst=3)  # 100 a second
    waits: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(50)

    def reserve() -> None:
        barrier.wait()
        wait = limit.reserve()
        with lock:
            waits.append(wait)

    _on_threads(reserve, 50)
    waits.sort()
    assert sum(w < 0.001 for w in waits) <= 3  # the burst, and no more, goes at once
    steps = [b - a for a, b in zip(waits[3:], waits[4:], strict=False)]
    assert all(abs(step - 0.01) < 1e-9 for step in steps)  # then one every 10 ms, each slot taken once


def test_tokens_per_minute_waits_for_the_tokens_a_call_may_use() -> None:
    """A call reserving a bucket's worth of tokens makes the next one wait for them to drain."""
    limit = RateLimit(tokens_per_minute=60_000)  # 1,000 a second; a burst of 1,000
    assert limit.reserve(1000) == 0.0
    assert 0.45 < limit.reserve(500) <= 0.5
    limit.charge(1000)  # the last call used 1,000 more than it reserved
    assert 1.4 < limit.reserve(1) < 1.6


def test_a_wait_is_an_event_and_spent_from_the_time_budget() -> None:
    """The second model call waits for its slot: a RateWaited event says how long, and the run's clock counts it."""
    limit = RateLimit(requests_per_minute=300, burst=1)  # one call every 0.2 s
    events: list[Any] = []
    result = Agent(_limited(TWO_TURNS, limit), TOOLS, limits=Limits(max_seconds=30)).run("go", on_event=events.append)
    waits = [e for e in events if isinstance(e, RateWaited)]
    assert result.stop.value == "answered"
    assert [w.turn for w in waits] == [2] and 0.15 < waits[0].seconds <= 0.2 and not waits[0].cut
    assert result.state.elapsed >= 0.15


def test_a_wait_past_the_time_budget_ends_the_run_time_limit() -> None:
    """A slot further off than the budget allows: the run waits out its budget only, and ends time_limit."""
    limit = RateLimit(requests_per_minute=6, burst=1)  # one call every 10 s
    events: list[Any] = []
    started = time.monotonic()
    result = Agent(_limited(TWO_TURNS, limit), TOOLS, limits=Limits(max_seconds=0.3)).run("go", on_event=events.append)
    assert time.monotonic() - started < 5
    assert result.stop.value == "time_limit"
    [wait] = [e for e in events if isinstance(e, RateWaited)]
    assert wait.cut and wait.seconds < 0.35
    assert len(result.state.messages) == 4  # system, task, the first reply, its observation: no second reply


def test_a_cancelled_wait_leaves_the_call_unmade() -> None:
    """Cancelling arun while it waits for its slot: RunCancelled, the turn is undone, and the run can go on."""
    from agent_fsm import RunCancelled

    limit = RateLimit(requests_per_minute=6, burst=1)
    agent = Agent(_limited(TWO_TURNS, limit), TOOLS)

    async def cancel_while_waiting() -> Any:
        task = asyncio.ensure_future(agent.arun("go"))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(RunCancelled) as caught:
            await task
        return caught.value.state

    started = time.monotonic()
    state = asyncio.run(cancel_while_waiting())
    assert time.monotonic() - started < 2  # the 10 s wait was cut short
    assert state.turns == 1 and state.machine_state == "Ready"


def test_runs_on_threads_share_one_limit() -> None:
    """Ten sync runs on ten threads, one model: their model calls start a rate's step apart."""
    limit = RateLimit(requests_per_minute=1200, burst=1)  # one every 50 ms
    starts: list[float] = []
    lock = threading.Lock()

    class Noting(ScriptedModel):
        def chat(self, messages: Any, tools: Any, **extra: Any) -> Any:
            with lock:
                starts.append(time.monotonic())
            return super().chat(messages, tools, **extra)

    model = Noting([answer_message("done")])
    model.rate_limit = limit  # type: ignore[attr-defined]
    agent = Agent(model, TOOLS)
    _on_threads(lambda: agent.run("go"), 10)
    starts.sort()
    assert len(starts) == 10
    assert all(b - a > 0.04 for a, b in zip(starts, starts[1:], strict=False))
