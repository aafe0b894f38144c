"""Effect-free calls of one reply run together when the agent (or tool) opts in; the state is the sequential one."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import (
    Agent,
    Limits,
    ScriptedModel,
    ToolCall,
    ToolDefinitionError,
    ToolError,
    ToolSpec,
    Verdict,
    allow_all,
    answer_message,
)
from agent_fsm.engine import RunState

DELAY = 0.3


def _reply(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """One assistant message proposing ``calls`` (id, name, arguments) at once."""
    import json

    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
        ],
    }


THREE = _reply(("c1", "look", {"key": "a"}), ("c2", "look", {"key": "b"}), ("c3", "look", {"key": "c"}))


def _timed_tools(spans: list[tuple[str, float, float]], *, asynchronous: bool = False) -> dict[str, ToolSpec]:
    """``look`` waits DELAY seconds and records when it started and ended."""
    lock = threading.Lock()

    def look(key: str) -> str:
        start = time.monotonic()
        time.sleep(DELAY)
        with lock:
            spans.append((key, start, time.monotonic()))
        return f"value of {key}"

    async def alook(key: str) -> str:
        start = time.monotonic()
        await asyncio.sleep(DELAY)
        spans.append((key, start, time.monotonic()))
        return f"value of {key}"

    return {"look": ToolSpec("Look a key up.", {"key": str}, alook if asynchronous else look)}


def _overlapping(spans: list[tuple[str, float, float]]) -> bool:
    """Every handler started before any of them ended: all three ran at once."""
    return len(spans) == 3 and max(s for _, s, _ in spans) < min(e for _, _, e in spans)


def test_three_effect_free_calls_overlap_on_the_sync_driver() -> None:
    """With parallel_calls the three handlers run at once; the observations stay in proposal order."""
    spans: list[tuple[str, float, float]] = []
    agent = Agent(ScriptedModel([THREE, answer_message("done")]), _timed_tools(spans), parallel_calls=True)
    result = agent.run("look up a, b and c")
    assert result.stop.value == "answered"
    assert _overlapping(spans), spans
    assert [o.call_id for o in result.state.observations] == ["c1", "c2", "c3"]
    assert [o.content for o in result.state.observations] == ["value of a", "value of b", "value of c"]


def test_without_the_option_calls_run_one_at_a_time() -> None:
    """The default is unchanged: each handler starts after the previous one ended."""
    spans: list[tuple[str, float, float]] = []
    Agent(ScriptedModel([THREE, answer_message("done")]), _timed_tools(spans)).run("look up a, b and c")
    assert not _overlapping(spans)
    assert all(spans[i][2] <= spans[i + 1][1] for i in range(2))


@pytest.mark.parametrize("asynchronous", [False, True])
def test_three_effect_free_calls_overlap_on_the_async_driver(asynchronous: bool) -> None:
    """Under arun async handlers run as tasks and plain ones in worker threads: all three at once."""
    spans: list[tuple[str, float, float]] = []
    agent = Agent(
        ScriptedModel([THREE, answer_message("done")]),
        _timed_tools(spans, asynchronous=asynchronous),
        parallel_calls=True,
    )
    result = asyncio.run(agent.arun("look up a, b and c"))
    assert result.stop.value == "answered"
    assert _overlapping(spans), spans
    assert [o.content for o in result.state.observations] == ["value of a", "value of b", "value of c"]


def test_one_tool_can_opt_in_alone() -> None:
    """ToolSpec(parallel=True) runs that tool's calls together without the agent-wide option."""
    spans: list[tuple[str, float, float]] = []
    tools = {"look": attrs.evolve(_timed_tools(spans)["look"], parallel=True)}
    Agent(ScriptedModel([THREE, answer_message("done")]), tools).run("look up a, b and c")
    assert _overlapping(spans), spans


def test_an_effectful_tool_cannot_be_marked_parallel() -> None:
    """An effect runs alone and in order, gated just before it: parallel=True on it is a definition error."""
    with pytest.raises(ToolDefinitionError, match="effectful"):
        ToolSpec("Pay.", {"amount": int}, lambda amount: amount, effectful=True, parallel=True)


def test_an_effectful_call_waits_for_its_turn_and_ends_the_batch() -> None:
    """Calls after an effectful one are not started before it: what they read may depend on its effect."""
    ledger: list[str] = []

    def read(key: str) -> list[str]:
        return list(ledger)

    def write(key: str) -> str:
        ledger.append(key)
        return "written"

    tools = {
        "read": ToolSpec("Read.", {"key": str}, read),
        "write": ToolSpec("Write.", {"key": str}, write, effectful=True),
    }
    reply = _reply(("c1", "read", {"key": "x"}), ("c2", "write", {"key": "y"}), ("c3", "read", {"key": "z"}))
    agent = Agent(ScriptedModel([reply, answer_message("done")]), tools, gate=allow_all, parallel_calls=True)
    result = agent.run("read, write, read")
    assert [o.content for o in result.state.observations] == [[], "written", ["y"]]


def test_a_failing_branch_does_not_lose_the_others() -> None:
    """One handler raising a ToolError is that call's error observation; the calls beside it keep their results."""

    def look(key: str) -> str:
        time.sleep(0.05)
        if key == "b":
            raise ToolError("no such key: b")
        return f"value of {key}"

    agent = Agent(
        ScriptedModel([THREE, answer_message("done")]),
        {"look": ToolSpec("Look a key up.", {"key": str}, look)},
        parallel_calls=True,
    )
    observations = agent.run("look up a, b and c").state.observations
    assert [(o.ok, o.kind, o.content) for o in observations] == [
        (True, "result", "value of a"),
        (False, "error", "no such key: b"),
        (True, "result", "value of c"),
    ]


def test_a_call_the_gate_refuses_is_never_started() -> None:
    """No handler runs that the gate has not allowed: a refused call behind the head never starts."""
    ran: list[str] = []

    def look(key: str) -> str:
        ran.append(key)
        return key

    def gate(call: Any) -> Verdict:
        return Verdict("deny", "not b") if call.arguments.get("key") == "b" else Verdict("allow", "")

    agent = Agent(
        ScriptedModel([THREE, answer_message("done")]),
        {"look": ToolSpec("Look a key up.", {"key": str}, look)},
        gate=gate,
        parallel_calls=True,
    )
    observations = agent.run("look up a, b and c").state.observations
    assert sorted(ran) == ["a", "c"]
    assert [o.kind for o in observations] == ["result", "denied", "result"]


# --- the property: parallel equals sequential ---------------------------------------

_KEYS = st.sampled_from(["a", "b", "c", "boom", 7])
_NAMES = st.sampled_from(["look", "look", "slow", "write", "capped", "missing"])


def _world() -> dict[str, ToolSpec]:
    """Effect-free tools (one failing on 'boom', one capped), an effectful one; a fresh ledger per run."""
    ledger: list[str] = []

    def look(key: str) -> str:
        if key == "boom":
            raise ToolError("boom")
        return f"{key}:{len(ledger)}"

    def slow(key: str) -> str:
        time.sleep(0.001)
        return key.upper()

    def write(key: str) -> int:
        time.sleep(0.002)  # a read started beside it (wrongly) would see the ledger before the write
        ledger.append(key)
        return len(ledger)

    return {
        "look": ToolSpec("Look.", {"key": str}, look),
        "slow": ToolSpec("Slow look.", {"key": str}, slow),
        "write": ToolSpec("Write.", {"key": str}, write, effectful=True),
        "capped": ToolSpec("Capped look.", {"key": str}, slow, max_calls=1),
    }


def _gate(call: Any) -> Verdict:
    """Refuses the key 'c' (so a refusal can sit between allowed calls); allows everything else."""
    return Verdict("deny", "not c") if call.arguments.get("key") == "c" else Verdict("allow", "")


@st.composite
def _replies(draw: st.DrawFn) -> list[dict[str, Any]]:
    turns = []
    for turn in range(draw(st.integers(1, 3))):
        calls = draw(st.lists(st.tuples(_NAMES, _KEYS), min_size=1, max_size=5))
        turns.append(_reply(*((f"t{turn}c{i}", n, {"key": k}) for i, (n, k) in enumerate(calls))))
    return [*turns, answer_message("done")]


def _comparable(state: RunState) -> dict[str, Any]:
    """The whole state but its timing, its id and its nonce (random per run)."""
    data = attrs.asdict(state)
    for timing in ("elapsed", "run_id", "nonce"):
        data.pop(timing)
    return data


@given(
    replies=_replies(),
    limits=st.builds(
        Limits,
        max_tool_calls=st.none() | st.integers(1, 8),
        max_turns=st.integers(2, 5),
        repeated_denials=st.integers(2, 4),
    ),
)
def test_parallel_run_state_equals_the_sequential_one(replies: list[dict[str, Any]], limits: Limits) -> None:
    """For any replies and budgets, running effect-free calls together ends in the state running them in order gives."""
    one_by_one = Agent(ScriptedModel(replies), _world(), gate=_gate, limits=limits).run("go")
    together = Agent(ScriptedModel(replies), _world(), gate=_gate, limits=limits, parallel_calls=True).run("go")
    assert _comparable(together.state) == _comparable(one_by_one.state)
    assert together.stop == one_by_one.stop


@given(replies=_replies())
def test_parallel_equals_sequential_on_the_async_driver(replies: list[dict[str, Any]]) -> None:
    """The same property under arun (tasks and worker threads instead of a thread pool)."""
    one_by_one = Agent(ScriptedModel(replies), _world(), gate=_gate).run("go")
    together = asyncio.run(Agent(ScriptedModel(replies), _world(), gate=_gate, parallel_calls=True).arun("go"))
    assert _comparable(together.state) == _comparable(one_by_one.state)


# --- with a store ---------------------------------------------------------------------


def test_a_stored_parallel_run_records_effects_in_proposal_order(tmp_path: Any) -> None:
    """Under a SQLite store the effectful calls' intents and observations are committed in proposal order, and the
    stored state is the sequential run's."""
    from agent_fsm.store import SqliteStore

    reply = _reply(
        ("c1", "look", {"key": "a"}),
        ("c2", "write", {"key": "x"}),
        ("c3", "slow", {"key": "b"}),
        ("c4", "look", {"key": "e"}),
        ("c5", "write", {"key": "y"}),
    )
    replies = [reply, answer_message("done")]
    stores = [SqliteStore(tmp_path / f"{p}.db") for p in ("one_by_one", "together")]
    for store, parallel in zip(stores, (False, True), strict=True):
        Agent(ScriptedModel(replies), _world(), gate=_gate, parallel_calls=parallel).run("go", store=store, run_id="p1")
    for store in stores:
        assert [(e.call_id, e.outcome) for e in store.effects("p1")] == [("c2", "result"), ("c5", "result")]
    assert [o.content for o in stores[1].load("p1").state.observations] == ["a:0", 1, "B", "e:1", 2]
    assert _comparable(stores[0].load("p1").state) == _comparable(stores[1].load("p1").state)


def test_a_call_started_early_gets_the_key_it_would_get_at_its_turn() -> None:
    """The idempotency key in a parallel call's ToolContext is the one its place in the run gives it."""
    from agent_fsm import ToolContext

    def keyed(key: str, context: ToolContext) -> str:
        return context.idempotency_key

    tools = {"keyed": ToolSpec("Key.", {"key": str}, keyed)}
    reply = _reply(("c1", "keyed", {"key": "a"}), ("c2", "keyed", {"key": "a"}), ("c3", "keyed", {"key": "b"}))
    runs = [
        Agent(ScriptedModel([reply, answer_message("done")]), tools, parallel_calls=p).run("go", run_id="k")
        for p in (False, True)
    ]
    from agent_fsm.engine._boundary import idempotency_key

    calls = [ToolCall("c1", "keyed", {"key": "a"}), ToolCall("c2", "keyed", {"key": "a"})]
    calls.append(ToolCall("c3", "keyed", {"key": "b"}))
    for run in runs:  # each run has its own nonce, so each is held to the keys of its own places
        state = run.state
        at_turn = [
            idempotency_key("k", attrs.evolve(state, observations=state.observations[:place]), call)
            for place, call in enumerate(calls)
        ]
        assert [o.content for o in state.observations] == at_turn and len(set(at_turn)) == 3


# --- cancellation and time budgets ----------------------------------------------------


def test_a_cancelled_run_starts_no_call_after_the_cancellation() -> None:
    """Cancelling arun mid-batch lets the calls in flight finish (they are shielded, as any handler), starts nothing
    more, and leaves a state that continues to the sequential run's end."""
    from agent_fsm import RunCancelled

    spans: list[tuple[str, float, float]] = []
    tools = _timed_tools(spans, asynchronous=True)
    replies = [THREE, THREE, answer_message("done")]
    agent = Agent(ScriptedModel(replies), tools, parallel_calls=True)

    async def cancel_mid_batch() -> tuple[RunState, float]:
        task = asyncio.ensure_future(agent.arun("look up a, b and c"))
        await asyncio.sleep(DELAY / 2)
        task.cancel()
        cancelled_at = time.monotonic()
        with pytest.raises(RunCancelled) as caught:
            await task
        return caught.value.state, cancelled_at

    state, cancelled_at = asyncio.run(cancel_mid_batch())
    assert len(spans) == 3 and all(start < cancelled_at for _, start, _ in spans)  # nothing started after it
    assert state.turns == 1
    finished = asyncio.run(agent.aadvance(state))
    sequential = Agent(ScriptedModel(replies), _timed_tools([])).run("look up a, b and c")
    assert finished.stop == sequential.stop
    assert [o.content for o in finished.state.observations] == [o.content for o in sequential.state.observations]


@pytest.mark.parametrize("parallel", [False, True])
def test_a_time_budget_is_checked_as_if_the_calls_ran_in_order(parallel: bool) -> None:
    """A budget spent during the batch ends the run time_limit before the next model call, as it does one by one."""
    spans: list[tuple[str, float, float]] = []
    agent = Agent(
        ScriptedModel([THREE, THREE, answer_message("done")]),
        _timed_tools(spans),
        limits=Limits(max_seconds=DELAY / 2),
        parallel_calls=parallel,
    )
    result = agent.run("look up a, b and c")
    assert result.stop.value == "time_limit"
    assert result.state.turns == 1 and len(result.state.observations) == 3


def test_the_options_take_only_true_or_false() -> None:
    """parallel_calls and ToolSpec(parallel=...) are flags: anything else is refused when the agent or tool is made."""
    with pytest.raises(TypeError, match="parallel_calls"):
        Agent(ScriptedModel([answer_message("done")]), {}, parallel_calls="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ToolSpec("Look.", {"key": str}, lambda key: key, parallel=1)  # type: ignore[arg-type]
