"""The async driver: async parts awaited, sync refusals, cancellation, the time budget, blocking tools, races."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import attrs
import pytest

from agent_fsm import (
    Limits,
    NotPaused,
    NotSynchronous,
    RunCancelled,
    RunState,
    ScriptedModel,
    Stop,
    ToolSpec,
    aadvance,
    answer_message,
    aresume,
    arun,
    check_run,
    run,
)
from tests.async_worlds import AsyncModel, async_gate, async_tools
from tests.payments import make_payments, pay_call, pay_gate


def _script(cents: int = 10) -> list[dict[str, Any]]:
    return [pay_call(cents), answer_message("paid")]


def _cancelled(run: Coroutine[Any, Any, Any], when: Callable[[], Awaitable[Any]]) -> RunState:
    """The state ``run`` leaves when its task is cancelled once ``when()`` is done (RunCancelled carries it)."""

    async def main() -> RunState:
        task = asyncio.ensure_future(run)
        await when()
        task.cancel()
        with pytest.raises(RunCancelled) as raised:
            await task
        return raised.value.state

    return asyncio.run(main())


def test_an_async_world_runs_to_the_same_ending_as_the_plain_one() -> None:
    """Async model, gate and handlers: the payment is made once and the run answers, as under run()."""
    tools, ledger = make_payments()
    result = asyncio.run(
        arun("pay", AsyncModel(ScriptedModel(_script())), async_tools(tools), gate=async_gate(pay_gate))
    )
    assert result.stop is Stop.ANSWERED and result.answer == "paid"
    assert [e["cents"] for e in ledger] == [10] and ledger[0]["call_id"] == "c1"  # current_call_id seen in async
    assert all(check_run(result, ledger, Limits()).values())


@pytest.mark.parametrize("part", ["gate", "handler", "answer_check", "model"])
def test_the_sync_driver_refuses_an_async_part_by_name_and_keeps_the_run(part: str) -> None:
    """run() given an async part: NotSynchronous (a TypeError) naming it; nothing ran, the state is consistent."""
    tools, ledger = make_payments()
    model: Any = ScriptedModel(_script())
    gate: Any = pay_gate
    check: Any = None
    if part == "gate":
        gate = async_gate(pay_gate)
    elif part == "handler":
        tools = async_tools(tools)
    elif part == "answer_check":

        async def check(text: str, state: RunState) -> None:
            return None

    else:
        model = AsyncModel(model)
    with pytest.raises(NotSynchronous, match="asynchronous|no chat") as raised:
        run("pay", model, tools, gate=gate, answer_check=check)
    assert isinstance(raised.value, TypeError) and raised.value.state is not None
    assert ledger == ([] if part != "answer_check" else [ledger[0]])  # only the answer was left to check
    name = {"gate": "gate_async", "handler": "pay", "answer_check": "check", "model": "chat"}[part]
    assert name in str(raised.value)


def test_cancelling_during_a_model_call_undoes_the_call_and_aadvance_finishes_the_run() -> None:
    """Cancelled mid-call: RunCancelled carries a state resting in Ready with that turn undone; it round-trips
    through JSON and aadvance ends it exactly as an uninterrupted run ends."""
    tools, ledger = make_payments()
    slow = AsyncModel(ScriptedModel(_script()), delay=10.0)

    state = _cancelled(arun("pay", slow, tools, gate=pay_gate, run_id="r"), lambda: asyncio.sleep(0.05))
    assert isinstance(state, RunState) and state.machine_state == "Ready"
    assert state.turns == 0 and state.prompt_token_log == [] and state.path == []  # as it was before the call
    loaded = RunState.from_json(state.to_json())
    finished = asyncio.run(aadvance(loaded, AsyncModel(ScriptedModel(_script())), tools, gate=pay_gate))
    plain_tools, plain_ledger = make_payments()
    plain = run("pay", ScriptedModel(_script()), plain_tools, gate=pay_gate, run_id="r")
    assert finished.stop is plain.stop is Stop.ANSWERED
    assert finished.state.messages == plain.state.messages and finished.state.turns == plain.state.turns
    assert len(ledger) == len(plain_ledger) == 1


def test_cancelling_during_an_effect_lets_it_finish_and_records_it() -> None:
    """Cancelled while a handler runs: the handler completes, its observation is in the state RunCancelled
    carries, and going on does not run it again."""
    tools, ledger = make_payments()
    started = asyncio.Event()
    inner = tools["pay"].handler

    async def slow_pay(account: str, cents: int) -> str:
        started.set()
        await asyncio.sleep(0.2)
        return str(inner(account=account, cents=cents))

    tools["pay"] = ToolSpec(tools["pay"].description, tools["pay"].schema, slow_pay, effectful=True)

    state = _cancelled(arun("pay", ScriptedModel(_script()), tools, gate=pay_gate), started.wait)
    assert len(ledger) == 1 and [o.kind for o in state.observations] == ["result"]
    assert state.tool_attempts == 1 and state.messages[-1]["role"] == "tool"
    finished = asyncio.run(aadvance(state, ScriptedModel(_script()), tools, gate=pay_gate))
    assert finished.stop is Stop.ANSWERED and len(ledger) == 1


def test_a_cancellation_deferred_by_an_effect_stops_the_run_before_the_next_calls_gate() -> None:
    """Two calls in one reply, cancelled during the first's handler: it finishes, and the second call is
    neither judged nor run (a plain gate and handler, made in place, are still held back)."""
    tools, ledger = make_payments()
    started = asyncio.Event()
    inner = tools["pay"].handler
    judged: list[str] = []

    async def slow_pay(account: str, cents: int) -> str:
        started.set()
        await asyncio.sleep(0.2)
        return str(inner(account=account, cents=cents))

    def counting_gate(call: Any) -> Any:
        judged.append(call.call_id)
        return pay_gate(call)

    first = ToolSpec(tools["pay"].description, tools["pay"].schema, slow_pay, effectful=True)
    tools = {"pay": first, "pay_now": ToolSpec(first.description, first.schema, inner, effectful=True)}
    reply = pay_call(10)
    second = json.loads(json.dumps(pay_call(12, "c2")["tool_calls"][0]))
    second["function"]["name"] = "pay_now"
    reply["tool_calls"].append(second)

    model = ScriptedModel([reply, answer_message("paid")])
    state = _cancelled(arun("pay", model, tools, gate=counting_gate), started.wait)
    assert [e["cents"] for e in ledger] == [10] and judged == ["c1"]
    assert [o.call_id for o in state.observations] == ["c1"] and [c.call_id for c in state.pending] == ["c2"]


def test_a_time_budget_cuts_an_async_model_call_off_and_ends_time_limit() -> None:
    """Limits(max_seconds): a model call that would outlast the budget is cut off; the run ends time_limit."""
    tools, _ = make_payments()
    slow = AsyncModel(ScriptedModel(_script()), delay=5.0)
    began = time.monotonic()
    result = asyncio.run(arun("pay", slow, tools, gate=pay_gate, limits=Limits(max_seconds=0.2)))
    assert time.monotonic() - began < 2.0
    assert result.stop is Stop.TIME_LIMIT and result.code == "time_limit"
    assert result.state.path[-2:] == ["Proposing", "TimeLimit"] and "time budget" in (result.reason or "")
    assert result.state.elapsed >= 0.2 and result.state.fault is not None


def test_a_time_budget_is_checked_before_each_admission_in_the_sync_driver() -> None:
    """A sync model taking 60 ms a call under a 100 ms budget: the run stops time_limit after its second call,
    the calls of that reply answered as not run, and the time spent is saved with the state."""
    tools, ledger = make_payments()
    script = [pay_call(1, "a"), pay_call(2, "b"), pay_call(3, "c"), answer_message("done")]

    class Slow(ScriptedModel):
        def chat(self, messages: Any, tools: Any = ()) -> Any:
            time.sleep(0.06)
            return super().chat(messages, tools)

    result = run("pay", Slow(script), tools, gate=pay_gate, limits=Limits(max_seconds=0.1))
    assert result.stop is Stop.TIME_LIMIT and result.state.turns == 2
    assert [e["cents"] for e in ledger] == [1]
    assert result.state.observations[-1].kind == "denied" and "time_limit" in result.state.observations[-1].content
    assert json.loads(result.state.to_json())["elapsed"] >= 0.1


def test_a_state_saved_before_elapsed_existed_still_loads() -> None:
    """A saved state without the elapsed field (format 2 as first written) loads with elapsed 0."""
    tools, _ = make_payments()
    data = json.loads(run("pay", ScriptedModel(_script()), tools, gate=pay_gate).state.to_json())
    del data["elapsed"]
    assert RunState.from_json(json.dumps(data)).elapsed == 0.0
    data["elapsed"] = -1
    with pytest.raises(ValueError, match="elapsed"):
        RunState.from_json(json.dumps(data))


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan"), True, "5"])
def test_max_seconds_must_be_a_positive_number(value: Any) -> None:
    with pytest.raises(ValueError):
        Limits(max_seconds=value)


def test_a_blocking_tool_runs_in_a_worker_thread_under_arun_only() -> None:
    """ToolSpec(blocking=True): under arun the handler runs off the event loop's thread; under run, inline."""
    seen: list[str] = []

    def lookup(account: str) -> int:
        seen.append(threading.current_thread().name)
        return 1

    tools = {"balance": ToolSpec("Read a balance.", {"account": str}, lookup, blocking=True)}
    script = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "b", "function": {"name": "balance", "arguments": '{"account": "A"}'}}],
        },
        answer_message("ok"),
    ]
    asyncio.run(arun("t", ScriptedModel(script), tools))
    run("t", ScriptedModel(script), tools)
    main = threading.main_thread().name
    assert seen[0] != main and seen[1] == main


def test_two_racing_async_decisions_on_one_pause_run_the_call_once() -> None:
    """Two aresume calls on the same paused state, racing across an async gate: one goes through, one is refused."""
    tools, ledger = make_payments()
    gate = async_gate(pay_gate)
    paused = asyncio.run(arun("pay", ScriptedModel(_script(50)), tools, gate=gate))
    assert paused.stop is Stop.AWAITING_APPROVAL

    async def race() -> list[Any]:
        model = ScriptedModel(_script(50))
        return await asyncio.gather(
            aresume(paused.state, model, tools, approve=True, gate=gate),
            aresume(paused.state, model, tools, approve=True, gate=gate),
            return_exceptions=True,
        )

    outcomes = asyncio.run(race())
    assert sum(isinstance(o, NotPaused) for o in outcomes) == 1
    assert [o.stop for o in outcomes if not isinstance(o, BaseException)] == [Stop.ANSWERED]
    assert [e["cents"] for e in ledger] == [50]


def test_a_stored_async_run_commits_what_a_stored_sync_run_commits(tmp_path: Any) -> None:
    """arun with a SqliteStore: the same stored state, status and effect records (intent then result) as run.

    Each run has its own nonce, so its own idempotency keys: two databases never share one.
    """
    from agent_fsm.store import SqliteStore

    rows, keys = [], []
    for name, drive in (("sync", "run"), ("async", "arun")):
        tools, ledger = make_payments()
        store = SqliteStore(tmp_path / f"{name}.db")
        if drive == "run":
            run("pay", ScriptedModel(_script()), tools, gate=pay_gate, store=store, run_id="r")
        else:
            asyncio.run(
                arun("pay", ScriptedModel(_script()), async_tools(tools), gate=pay_gate, store=store, run_id="r")
            )
        stored = store.load("r")
        keys.append([e.idempotency_key for e in store.effects("r")])
        effects = [(e.call_id, e.tool, e.outcome) for e in store.effects("r")]
        rows.append((stored.status, attrs.evolve(stored.state, nonce="").to_json(), effects, len(ledger)))
    assert rows[0] == rows[1] and rows[0][0] == "ended" and rows[0][3] == 1 and rows[0][2]
    assert keys[0] and set(keys[0]).isdisjoint(keys[1])


def test_a_cancelled_stored_run_is_committed_as_it_stands(tmp_path: Any) -> None:
    from agent_fsm.store import SqliteStore

    tools, _ = make_payments()
    store = SqliteStore(tmp_path / "runs.db")

    slow = AsyncModel(ScriptedModel(_script()), delay=10.0)
    state = _cancelled(arun("pay", slow, tools, gate=pay_gate, store=store, run_id="r"), lambda: asyncio.sleep(0.05))
    assert store.load("r").state == state and state.machine_state == "Ready"
