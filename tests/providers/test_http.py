"""The shared exchange through httpx.MockTransport: failures a loopback socket cannot stage, retry rules, limits."""

from __future__ import annotations

import email.utils
import threading
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from agent_fsm import ProviderFailure
from agent_fsm.providers import FAILURE_KINDS, OpenAIChat
from agent_fsm.providers._retry import retry_after as _retry_after

from .loopback import Reply

ANSWER = {"choices": [{"message": {"role": "assistant", "content": "ok"}}], "usage": {"prompt_tokens": 5}}
HELLO = [{"role": "user", "content": "hi"}]


class Script:
    """A MockTransport handler that plays exceptions or responses in order and counts calls."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.calls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        step = self.steps.pop(0) if self.steps else httpx.Response(200, json=ANSWER)
        if isinstance(step, type) and issubclass(step, Exception):
            raise step("scripted", request=request)
        return step


def _model(script: Script, sleeps: list[float], **options) -> OpenAIChat:
    return OpenAIChat(
        base_url="http://provider.test/v1",
        model="m",
        transport=httpx.MockTransport(script),
        sleep=sleeps.append,
        **options,
    )


def _failure(model: OpenAIChat) -> ProviderFailure:
    with pytest.raises(ProviderFailure) as caught:
        model.chat(HELLO)
    return caught.value


@pytest.mark.parametrize("exc", [httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ConnectError])
def test_failures_before_sending_are_retried(sleeps, exc):
    """Connect/pool timeouts and connect errors never reached the server: retried, then the answer."""
    script = Script(exc, exc)
    reply = _model(script, sleeps).chat(HELLO)
    assert reply.message["content"] == "ok" and reply.prompt_tokens == 5
    assert script.calls == 3 and sleeps == [0.5, 1.0]


@pytest.mark.parametrize(
    ("exc", "kind", "phase"),
    [
        (httpx.ReadTimeout, "timeout", "waiting for the reply"),
        (httpx.WriteTimeout, "timeout", "sending the request"),
        (httpx.RemoteProtocolError, "disconnected", "dropped"),
        (httpx.ReadError, "disconnected", "dropped"),
        (httpx.WriteError, "transport", "WriteError"),
    ],
)
def test_failures_after_sending_are_not_retried(sleeps, exc, kind, phase):
    """Once the request may have been served, one attempt only (the default), with a specific kind."""
    script = Script(exc)
    failure = _failure(_model(script, sleeps))
    assert (failure.kind, failure.status) == (kind, None)
    assert phase in failure.message
    assert isinstance(failure.__cause__, exc)
    assert script.calls == 1 and sleeps == []


def test_connect_timeout_names_its_limit(sleeps):
    """The message says which phase timed out and the limit that applied."""
    failure = _failure(_model(Script(*[httpx.ConnectTimeout] * 3), sleeps, connect_timeout=1.5))
    assert failure.kind == "timeout"
    assert "timed out connecting (limit 1.5s)" in failure.message
    assert "gave up after 3 attempts" in failure.message


def test_408_and_retry_after_ms_are_honoured(sleeps):
    """408 is transient; ``retry-after-ms`` wins over the backoff."""
    script = Script(httpx.Response(408, headers={"retry-after-ms": "250"}))
    assert _model(script, sleeps).chat(HELLO).message["content"] == "ok"
    assert sleeps == [0.25]


def test_an_unreadable_retry_after_falls_back_to_the_backoff(sleeps):
    """A Retry-After that is neither seconds nor a date is ignored."""
    script = Script(httpx.Response(429, headers={"retry-after": "soon"}))
    _model(script, sleeps, backoff=0.1).chat(HELLO)
    assert sleeps == [0.1]


def test_retry_after_as_an_http_date():
    """A date in the future is the seconds until then; one in the past means no wait."""
    future = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=100), usegmt=True)
    past = email.utils.format_datetime(datetime.now(UTC) - timedelta(seconds=100), usegmt=True)
    assert 90 < _retry_after(httpx.Headers({"retry-after": future})) <= 100
    assert _retry_after(httpx.Headers({"retry-after": past})) == 0.0
    assert _retry_after(httpx.Headers({})) is None


def test_backoff_doubles_and_is_capped_by_max_retry_wait(sleeps):
    """Waits double from ``backoff`` and never exceed ``max_retry_wait``."""
    script = Script(*[httpx.Response(502)] * 4)
    _model(script, sleeps, backoff=1.0, max_retry_wait=3.0, max_retries=4).chat(HELLO)
    assert sleeps == [1.0, 2.0, 3.0, 3.0]


def test_no_retries_means_one_attempt_and_no_note(sleeps):
    """max_retries=0: the first 500 is the fault, without a 'gave up' note."""
    script = Script(httpx.Response(500))
    failure = _failure(_model(script, sleeps, max_retries=0))
    assert (failure.kind, failure.status) == ("http", 500)
    assert "gave up" not in failure.message and script.calls == 1


def test_a_body_that_fails_to_decode_is_a_bad_response_never_retried(server, sleeps):
    """Invalid gzip (over loopback) is a bad response, even when unknown outcomes may be retried."""
    server.script(Reply(200, b"not gzip", (("content-encoding", "gzip"),)))
    model = OpenAIChat(base_url=server.url, model="m", sleep=sleeps.append, retry_unknown_outcome=True)
    failure = _failure(model)
    assert (failure.kind, failure.status) == ("bad_response", 200)
    assert "could not be decoded" in failure.message
    assert len(server.requests) == 1


def test_the_request_limit_counts_retries(sleeps):
    """Every attempt counts: two 500s spend a limit of three, leaving one request."""
    script = Script(httpx.Response(500), httpx.Response(500))
    model = _model(script, sleeps, max_requests=3)
    model.chat(HELLO)
    assert model.requests_made == 3
    failure = _failure(model)
    assert (failure.kind, failure.status) == ("request_limit", None)
    assert "3 requests already made" in failure.message
    assert script.calls == 3


def test_the_request_limit_holds_across_threads(sleeps):
    """Twenty threads sharing an adapter with max_requests=7: exactly seven requests are sent."""
    script = Script()
    model = _model(script, sleeps, max_requests=7)
    outcomes: list[str] = []
    lock = threading.Lock()

    def call() -> None:
        try:
            model.chat(HELLO)
            outcome = "ok"
        except ProviderFailure as exc:
            outcome = exc.kind
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=call) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["ok"] * 7 + ["request_limit"] * 13
    assert script.calls == 7


def test_credentials_in_the_url_never_reach_a_message(sleeps):
    """User info and query string are dropped from every URL a message shows."""
    model = OpenAIChat(
        base_url="http://user:hunter2@provider.test/v1?api-key=zzz-secret",
        model="m",
        transport=httpx.MockTransport(Script(httpx.Response(403))),
        sleep=sleeps.append,
    )
    failure = _failure(model)
    assert "hunter2" not in failure.message and "zzz-secret" not in failure.message
    assert "http://provider.test/v1" in failure.message
    assert "hunter2" not in repr(model) and "zzz" not in repr(model)


def test_every_kind_raised_is_documented():
    """The kinds the tests above observe are exactly the documented ones."""
    assert set(FAILURE_KINDS) == {
        "transport",
        "timeout",
        "disconnected",
        "truncated",
        "http",
        "bad_response",
        "stream_error",
        "request_limit",
        "invalid_request",
    }
