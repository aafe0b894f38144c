"""A RateLimit shared by 200 concurrent runs holds a real loopback server to its rate: no burst gets through."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from agent_fsm import Agent, RateLimit, RateWaited
from agent_fsm.providers import OpenAIChat, ProviderConfigError
from agent_fsm.testing import assert_rate_kept, most_in_window

from .loopback import LoopbackServer, Received, Reply, openai_answer

RUNS = 200
PER_SECOND = 50
BURST = 5


class _TimedServer(LoopbackServer):
    """The loopback server, noting when each request arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[float] = []

    def _next(self, received: Received) -> Reply:
        self.arrivals.append(time.monotonic())
        return super()._next(received)


@pytest.fixture
def timed_server() -> Iterator[_TimedServer]:
    """A started loopback server that notes arrival times."""
    server = _TimedServer().start()
    yield server
    server.stop()


def test_two_hundred_concurrent_runs_keep_to_the_rate(timed_server: _TimedServer) -> None:
    """200 runs at once on arun, one model and one RateLimit: no second holds more than the burst plus the rate."""
    timed_server.script(*[openai_answer(f"answer {i}") for i in range(RUNS)])
    limit = RateLimit(requests_per_minute=PER_SECOND * 60, burst=BURST)
    model = OpenAIChat(base_url=timed_server.url + "/v1", model="m", rate_limit=limit, max_retries=0, max_requests=None)
    agent = Agent(model, {})
    waits: list[RateWaited] = []

    def heard(event: object) -> None:
        if isinstance(event, RateWaited):
            waits.append(event)

    async def all_at_once() -> list[str | None]:
        results = await asyncio.gather(*(agent.arun(f"task {i}", on_event=heard) for i in range(RUNS)))
        await model.aclose()
        return [r.answer for r in results]

    answers = asyncio.run(all_at_once())
    arrivals = timed_server.arrivals
    assert sorted(answers, key=str) == sorted((f"answer {i}" for i in range(RUNS)), key=str)
    assert len(arrivals) == RUNS
    # Starts are spaced 20 ms apart; arrivals may bunch by the loop's and the network's jitter. On a loaded
    # machine (a busy CI box) a thread may wait half a second for the processor, so 0.5 s is allowed: a limiter
    # that let the runs through at once would still show all 200 in one window, four times the bound.
    assert_rate_kept(arrivals, limit, window=1.0, jitter=0.5)
    assert_rate_kept(arrivals, limit, window=0.1, jitter=0.5)
    rate = (RUNS - 1) / (max(arrivals) - min(arrivals))
    assert rate <= PER_SECOND * 1.1
    assert len(waits) >= RUNS - BURST - 1 and all(not w.cut for w in waits)
    print(
        f"\n{RUNS} concurrent runs at {PER_SECOND}/s (burst {BURST}): measured {rate:.1f} requests/s, "
        f"at most {most_in_window(arrivals, 1.0)} in any 1 s window"
    )


def test_the_adapter_refuses_a_rate_limit_that_is_not_one() -> None:
    """rate_limit= takes a RateLimit: a number is a configuration error, named."""
    with pytest.raises(ProviderConfigError, match="rate_limit must be a RateLimit"):
        OpenAIChat(base_url="http://127.0.0.1:9/v1", model="m", rate_limit=60)  # type: ignore[arg-type]
