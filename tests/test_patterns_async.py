"""The fan-out under the async driver: the same results as the threaded one, and reads that really overlap."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hypothesis import given

from agent_fsm import HandlerError, NotSynchronous, ProviderFailure, ToolCall, ToolSpec, answer_message
from agent_fsm.examples.compare import AFTER_FAN_OUT, FAN_OUT
from agent_fsm.examples.support_desk import make_support_desk, refund_gate
from agent_fsm.patterns import PatternEnding, Plan, ScriptedReplies, aparallel, parallel
from tests.async_worlds import AsyncModel, async_gate, async_tools
from tests.test_patterns import _gate_of, _gates, _reads, _replies


def _both(reads: list[ToolCall], plan: Plan, replies: list[Any], gate: Any = None) -> tuple[Any, Any]:
    """The threaded and the gathered fan-out on fresh desks: (result or the error raised, effects), twice."""
    outcomes = []
    for runner in ("sync", "async"):
        desk = make_support_desk()
        try:
            if runner == "sync":
                outcome: Any = parallel(reads, plan, ScriptedReplies(replies), desk.tools, gate=gate)
            else:
                outcome = asyncio.run(aparallel(reads, plan, ScriptedReplies(replies), desk.tools, gate=gate))
        except Exception as exc:
            outcome = (type(exc), str(exc))
        outcomes.append((outcome, desk.effects))
    return outcomes[0], outcomes[1]


REFUND = ToolCall("r", "refund_order", {"order_id": "A-17", "amount_cents": 4999})


@pytest.mark.parametrize(
    ("reads", "replies", "ending"),
    [
        (FAN_OUT, [answer_message("Refunded 4999 cents.")], PatternEnding.REPLIED),
        ([*FAN_OUT, REFUND], [], PatternEnding.FAN_OUT_REFUSED),
        ([ToolCall("x", "read_policy", {}), ToolCall("x", "lookup_order", {"order_id": "A-17"})], [], None),
        ([ToolCall("order", "lookup_order", {"order_id": "Z-9"}), ToolCall("p", "read_policy", {})], [], None),
        (FAN_OUT, [ProviderFailure("unreachable")], PatternEnding.PROVIDER_ERROR),
    ],
    ids=["replied", "effectful-batch", "repeated-id", "failed-read", "provider-error"],
)
def test_aparallel_gives_the_same_result_as_parallel(reads, replies, ending) -> None:
    sync, gathered = _both(reads, AFTER_FAN_OUT, replies, gate=refund_gate)
    assert sync == gathered
    if ending is not None:
        assert sync[0].ending is ending


@given(replies=_replies, verdicts=_gates, reads=_reads)
def test_any_batch_any_gate_gives_the_same_result_both_ways(replies, verdicts, reads) -> None:
    """Results, observations, spend, effects, or the very error raised: identical under both drivers."""
    plan = Plan(steps=AFTER_FAN_OUT.steps, draft=AFTER_FAN_OUT.draft)
    sync, gathered = _both(reads, plan, replies, gate=_gate_of(verdicts))
    assert sync == gathered


def _sleepy_reads(delays: dict[str, float], kind: str) -> dict[str, ToolSpec]:
    """One read per name, sleeping its delay: ``async`` awaits, ``blocking`` and ``plain`` sleep in the handler."""

    def make(delay: float) -> Any:
        if kind == "async":

            async def read(key: str) -> dict[str, Any]:
                await asyncio.sleep(delay)
                return {"key": key, "done": time.perf_counter()}

            return read

        def read_blocking(key: str) -> dict[str, Any]:
            time.sleep(delay)
            return {"key": key, "done": time.perf_counter()}

        return read_blocking

    return {
        name: ToolSpec(f"Read {name}.", {"key": str}, make(delay), blocking=kind == "blocking")
        for name, delay in delays.items()
    }


def _timed(tools: dict[str, ToolSpec]) -> tuple[Any, float]:
    reads = [ToolCall(f"c-{name}", name, {"key": name}) for name in tools]
    plan = Plan(compose=lambda results: ",".join(r["key"] for r in results.values()))
    started = time.perf_counter()
    result = asyncio.run(aparallel(reads, plan, ScriptedReplies([]), tools))
    return result, time.perf_counter() - started


@pytest.mark.parametrize("kind", ["async", "blocking"])
def test_reads_overlap_under_the_async_driver(kind: str) -> None:
    """Three reads of 0.1 s each finish together in well under the 0.3 s they would take one after another."""
    result, elapsed = _timed(_sleepy_reads({"a": 0.1, "b": 0.1, "c": 0.1}, kind))
    assert result.ending is PatternEnding.REPLIED and result.output == "a,b,c"
    assert elapsed < 0.25, f"{kind} reads took {elapsed:.3f}s: they did not overlap"


def test_a_plain_handler_runs_inline_one_after_another() -> None:
    """The documented rule: a plain (not ``blocking``) handler runs on the loop, so plain reads do not overlap."""
    _, elapsed = _timed(_sleepy_reads({"a": 0.1, "b": 0.1, "c": 0.1}, "plain"))
    assert elapsed >= 0.3


def test_reads_are_joined_by_call_id_whatever_order_they_finish() -> None:
    """The slowest read is declared first and finishes last: observations still come in declared order."""
    result, _ = _timed(_sleepy_reads({"slow": 0.15, "mid": 0.1, "fast": 0.05}, "async"))
    assert [o.call_id for o in result.observations] == ["c-slow", "c-mid", "c-fast"]
    finished = [o.content["done"] for o in result.observations]
    assert finished == sorted(finished, reverse=True)  # they did finish in the reverse order
    assert result.output == "slow,mid,fast"


def test_async_gates_handlers_and_models_are_awaited() -> None:
    """The support desk made async throughout: the same refund and the same draft as the plain desk."""
    plain = make_support_desk()
    draft = [answer_message("Done.")]
    expected = parallel(FAN_OUT, AFTER_FAN_OUT, ScriptedReplies(draft), plain.tools, gate=refund_gate)
    desk = make_support_desk()
    model = AsyncModel(ScriptedReplies(draft))
    gathered = aparallel(FAN_OUT, AFTER_FAN_OUT, model, async_tools(desk.tools), gate=async_gate(refund_gate))
    result = asyncio.run(gathered)
    assert result == expected and desk.effects == plain.effects and model.calls == 1


def test_the_threaded_fan_out_refuses_an_async_handler_by_name() -> None:
    """parallel() cannot await: an async handler is a NotSynchronous error naming it, not a coroutine's repr."""
    tools = _sleepy_reads({"a": 0.0}, "async")
    with pytest.raises(NotSynchronous, match="handler .*read"):
        parallel([ToolCall("c", "a", {"key": "k"})], Plan(compose=lambda r: ""), ScriptedReplies([]), tools)


def test_a_handler_bug_propagates_after_every_read_finished() -> None:
    """As with the thread pool: the other reads run to their end, then the bug is raised."""
    finished: list[str] = []

    async def ok(key: str) -> str:
        await asyncio.sleep(0.02)
        finished.append(key)
        return key

    async def broken(key: str) -> str:
        raise RuntimeError("bug")

    tools = {"ok": ToolSpec("Fine.", {"key": str}, ok), "broken": ToolSpec("Buggy.", {"key": str}, broken)}
    reads = [ToolCall("b", "broken", {"key": "x"}), ToolCall("o", "ok", {"key": "y"})]
    with pytest.raises(HandlerError, match="bug"):
        asyncio.run(aparallel(reads, Plan(compose=lambda r: ""), ScriptedReplies([]), tools))
    assert finished == ["y"]
