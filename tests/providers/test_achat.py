"""
``achat`` on ``httpx.AsyncClient``: the same replies, retries, limits and failures as ``chat``.

Every recorded exchange is served twice from 127.0.0.1, once to ``chat`` and once
to ``achat``; the results must be identical. The retry rules are then replayed
through ``httpx.MockTransport`` (which serves both clients) under ``achat``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from agent_fsm import ModelReply, ProviderFailure
from agent_fsm.providers import OpenAIChat, ProviderConfigError

from .loopback import json_reply, openai_answer, slow
from .test_http import ANSWER, HELLO, Script
from .test_recorded import EXCHANGES, KEY, make_adapter


def _outcome(call: Any) -> Any:
    """The reply, or the failure's kind, status and message (failures compare by what they say)."""
    try:
        return call()
    except ProviderFailure as failure:
        return ("failure", failure.kind, failure.status, failure.message)


@pytest.mark.parametrize(("recording", "index"), EXCHANGES)
def test_achat_reads_every_recorded_exchange_as_chat_does(server, recording, index):
    """Same bytes, same result: the reply (message, prompt count, finish) or the same typed failure."""
    replies = [recording.reply(i) for i in range(index, len(recording.interactions))]
    declarations = recording.declarations()
    server.script(*replies)
    with make_adapter(recording, server.url) as model:
        expected = _outcome(lambda: model.chat(HELLO, declarations))
    sent = len(server.requests)
    server.replies.clear()  # what chat left unread
    server.script(*replies)

    async def main() -> Any:
        async with make_adapter(recording, server.url) as model:
            try:
                return await model.achat(HELLO, declarations)
            except ProviderFailure as failure:
                return ("failure", failure.kind, failure.status, failure.message)

    got = asyncio.run(main())
    assert got == expected
    assert len(server.requests) == 2 * sent  # and the same number of requests
    assert server.requests[sent].body == server.requests[0].body
    if isinstance(got, tuple):
        assert KEY not in got[3]


def _async_model(script: Script, sleep: Any, **options: Any) -> OpenAIChat:
    return OpenAIChat(
        base_url="http://provider.test/v1",
        model="m",
        async_transport=httpx.MockTransport(script),
        sleep=sleep,
        **options,
    )


def _arun(model: OpenAIChat) -> Any:
    async def main() -> Any:
        async with model:
            return await model.achat(HELLO)

    return asyncio.run(main())


@pytest.mark.parametrize("exc", [httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ConnectError])
def test_failures_before_sending_are_retried_under_achat(sleeps, exc):
    """Nothing reached the server: retried with the same doubling backoff as ``chat``."""
    script = Script(exc, exc)
    reply = _arun(_async_model(script, sleeps.append))
    assert (reply.message["content"], reply.prompt_tokens) == ("ok", 5)
    assert script.calls == 3 and sleeps == [0.5, 1.0]


@pytest.mark.parametrize("exc", [httpx.ReadTimeout, httpx.RemoteProtocolError])
def test_failures_after_sending_are_not_retried_under_achat(sleeps, exc):
    """The outcome is unknown: one attempt, unless a repeat is accepted (``retry_unknown_outcome``)."""
    script = Script(exc)
    with pytest.raises(ProviderFailure):
        _arun(_async_model(script, sleeps.append))
    assert (script.calls, sleeps) == (1, [])
    script = Script(exc)
    assert _arun(_async_model(script, sleeps.append, retry_unknown_outcome=True)).message["content"] == "ok"
    assert script.calls == 2


def test_retry_after_and_the_retry_budget_hold_under_achat(sleeps):
    """429 with ``retry-after-ms`` then 503 twice: the asked wait, then the backoff, then the noted give-up."""
    busy = httpx.Response(503, json={"error": {"message": "busy"}})
    script = Script(httpx.Response(429, headers={"retry-after-ms": "250"}, json={}), busy, busy)
    with pytest.raises(ProviderFailure) as caught:
        _arun(_async_model(script, sleeps.append))
    assert (caught.value.kind, caught.value.status) == ("http", 503)
    assert "gave up after 3 attempts" in caught.value.message
    assert sleeps == [0.25, 1.0]


def test_an_async_sleep_is_awaited_and_the_default_does_not_block_the_loop():
    """An ``async def`` sleep is awaited; the default waits with ``asyncio.sleep`` while other tasks run."""
    waited: list[float] = []

    async def asleep(seconds: float) -> None:
        waited.append(seconds)
        await asyncio.sleep(0)

    assert _arun(_async_model(Script(httpx.ConnectError), asleep)).message["content"] == "ok"
    assert waited == [0.5]

    async def main() -> tuple[Any, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        model = _async_model(Script(httpx.ConnectError), time.sleep, backoff=0.1)
        async with model:
            reply = await model.achat(HELLO)
        task.cancel()
        return reply, ticks

    reply, ticks = asyncio.run(main())
    assert reply.message["content"] == "ok" and ticks >= 5  # the loop kept running during the 0.1 s backoff


def test_the_request_limit_counts_achat_and_chat_together(sleeps):
    """``max_requests`` is one budget for both paths."""
    script = Script()
    model = OpenAIChat(
        base_url="http://provider.test/v1", model="m", max_requests=2, sleep=sleeps.append,
        transport=httpx.MockTransport(script), async_transport=httpx.MockTransport(script),
    )  # fmt: skip
    model.chat(HELLO)
    assert _arun(model).message["content"] == "ok"
    with pytest.raises(ProviderFailure) as caught:
        asyncio.run(model.achat(HELLO))
    assert caught.value.kind == "request_limit" and script.calls == 2


def test_a_sync_transport_alone_is_refused_by_achat():
    """``transport=`` without ``async_transport=``: achat would bypass it, so it says what to pass instead."""
    model = OpenAIChat(base_url="http://provider.test/v1", model="m", transport=httpx.MockTransport(Script()))
    with pytest.raises(ProviderConfigError, match="async_transport"):
        asyncio.run(model.achat(HELLO))
    with pytest.raises(ProviderConfigError, match="not both"):
        OpenAIChat(model="m", async_transport=httpx.MockTransport(Script()), async_client=httpx.AsyncClient())


def test_a_given_async_client_is_used_and_left_open():
    """``async_client=``: its transport serves the call, and ``aclose`` leaves it to its owner."""

    async def main() -> tuple[ModelReply, bool]:
        script = Script()
        async with httpx.AsyncClient(transport=httpx.MockTransport(script)) as client:
            model = OpenAIChat(base_url="http://provider.test/v1", model="m", async_client=client)
            reply = await model.achat(HELLO)
            await model.aclose()
            assert script.calls == 1
            return reply, client.is_closed

    reply, closed = asyncio.run(main())
    assert reply.message["content"] == "ok" and not closed


def test_one_adapter_serves_many_concurrent_calls_and_successive_event_loops(server):
    """Twenty concurrent ``achat`` calls share the adapter; a later ``asyncio.run`` gets a client of its own."""
    server.script(*[openai_answer(f"answer {i}") for i in range(21)])
    model = OpenAIChat(base_url=server.url + "/v1", model="m")

    async def many() -> list[ModelReply]:
        return await asyncio.gather(*[model.achat(HELLO) for _ in range(20)])

    replies = asyncio.run(many())
    assert sorted(r.message["content"] for r in replies) == sorted(f"answer {i}" for i in range(20))
    assert asyncio.run(model.achat(HELLO)).message["content"] == "answer 20"
    assert model.requests_made == 21
    asyncio.run(model.aclose())


def test_a_slow_reply_times_out_under_achat(server):
    """The read timeout bounds ``achat`` as it bounds ``chat``: kind ``timeout``, one attempt."""
    server.script(slow(json_reply(ANSWER), 2.0))
    model = OpenAIChat(base_url=server.url + "/v1", model="m", read_timeout=0.2, max_retries=3)
    started = time.monotonic()
    with pytest.raises(ProviderFailure) as caught:
        asyncio.run(model.achat(HELLO))
    assert caught.value.kind == "timeout" and "waiting for the reply" in caught.value.message
    assert time.monotonic() - started < 1.5 and len(server.requests) == 1
