"""
The measurements: interleaved timing rounds, retained memory, serialization, import, concurrency.

Timings are medians of interleaved rounds, so background load on a shared
machine weighs on every contestant alike; ratios are taken against the bare
loop's batches just before and after.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

from agent_fsm import RunState

from .contestants import Contestant
from .contestants.agent_fsm_ import agent_fsm_state
from .contestants.bare import bare_loop
from .scenarios import LATENCY, PAUSED, Job, Mismatch, Outcome, Scenario, new_job, scenarios


def _time_batch(contestant: Contestant, scenario: Scenario, repeat: int) -> float:
    """Seconds per run over ``repeat`` runs, each on a freshly built desk and model (built untimed)."""
    jobs = [new_job(scenario) for _ in range(repeat)]
    gc.collect()
    if contestant.sync is not None:
        fn = contestant.sync
        start = time.perf_counter()
        for job in jobs:
            fn(job)
        return (time.perf_counter() - start) / repeat
    afn = contestant.asynchronous
    assert afn is not None

    async def batch() -> float:
        begin = time.perf_counter()
        for job in jobs:
            await afn(job)
        return time.perf_counter() - begin

    # One event loop for the batch: its start-up is not a cost of a run.
    return asyncio.run(batch()) / repeat


def time_scenario(
    contestants: Sequence[Contestant], scenario: Scenario, rounds: int, sample: float
) -> tuple[float, dict[str, float]]:
    """
    The bare loop's median seconds per run, and every contestant's median ratio to it.

    A round runs the bare loop, one contestant, the bare loop again, the
    next contestant, and so on (the contestants in an order that rotates
    from round to round). A contestant's ratio in a round is its time over
    the mean of the two bare-loop batches around it, so load that comes and
    goes on a shared machine weighs on both sides of each ratio alike.
    Batches last about ``sample`` seconds.
    """
    base = next(c for c in contestants if c.name == "bare loop")
    others = [c for c in contestants if c is not base]
    repeat = {}
    for contestant in contestants:  # calibrate: enough runs for a batch to last about ``sample`` seconds
        once = min(_time_batch(contestant, scenario, 1) for _ in range(3))
        repeat[contestant.name] = max(1, round(sample / max(once, 1e-7)))
    bare: list[float] = []
    ratios: dict[str, list[float]] = {c.name: [] for c in others}
    for index in range(rounds):
        shift = index % len(others)
        before = _time_batch(base, scenario, repeat[base.name])
        bare.append(before)
        for contestant in [*others[shift:], *others[:shift]]:
            took = _time_batch(contestant, scenario, repeat[contestant.name])
            after = _time_batch(base, scenario, repeat[base.name])
            bare.append(after)
            ratios[contestant.name].append(took / ((before + after) / 2))
            before = after
    medians = {name: statistics.median(values) for name, values in ratios.items()}
    return statistics.median(bare), {base.name: 1.0, **medians}


def retained(make: Callable[[], Any], count: int) -> tuple[float, list[Any]]:
    """Bytes still allocated per object made by ``make`` with ``count`` kept alive (tracemalloc), and the objects."""
    make()  # warm every cache first, so only what one run keeps is counted
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make() for _ in range(count)]
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) / count, kept


def measure_memory(count: int) -> tuple[dict[str, float], list[RunState]]:
    """
    Retained bytes and saved size of a paused over-reach run, agent_fsm against the bare loop.

    Returns the figures and agent_fsm's ``count`` paused states (the serialization measure reuses them).
    """

    def engine_paused() -> RunState:
        return agent_fsm_state(new_job(PAUSED))

    def bare_paused() -> dict[str, Any]:
        return bare_loop(new_job(PAUSED))

    engine, states = retained(engine_paused, count)
    bare, kept = retained(bare_paused, count)
    figures = {
        "count": count,
        "engine": engine,
        "bare": bare,
        "engine_saved": len(states[0].to_json()),
        "bare_saved": len(json.dumps(kept[0])),
    }
    return figures, states


def measure_serialization(states: list[RunState], rounds: int) -> dict[str, float]:
    """``to_json``/``from_json`` of paused runs against ``json.dumps``/``json.loads`` of the same data."""
    texts = [s.to_json() for s in states]
    plain = [json.loads(t) for t in texts]  # the very fields to_json writes, as plain data
    if json.dumps(plain[0]) != texts[0] or RunState.from_json(texts[0]) != states[0]:
        raise Mismatch("json.dumps of the plain data must write to_json's text, and from_json restore the state")

    def timed(fn: Callable[[Any], Any], items: list[Any]) -> float:
        gc.collect()
        start = time.perf_counter()
        for item in items:
            fn(item)
        return time.perf_counter() - start

    samples: dict[str, list[float]] = {"to_json": [], "dumps": [], "from_json": [], "loads": []}
    for _ in range(rounds):
        samples["to_json"].append(timed(RunState.to_json, states))
        samples["dumps"].append(timed(json.dumps, plain))
        samples["from_json"].append(timed(RunState.from_json, texts))
        samples["loads"].append(timed(json.loads, texts))
    result: dict[str, float] = {name: statistics.median(values) for name, values in samples.items()}
    # Ratios are paired within a round, as in the timing table.
    result["write"] = statistics.median(a / b for a, b in zip(samples["to_json"], samples["dumps"]))
    result["read"] = statistics.median(a / b for a, b in zip(samples["from_json"], samples["loads"]))
    result["count"] = len(states)
    return result


# Run in a fresh interpreter: the import, then the over-reach run, through public names only.
_FRESH = """
import time
t = time.perf_counter()
import agent_fsm
imported = time.perf_counter() - t
from agent_fsm.examples.support_desk import TASK, make_support_desk, refund_gate
call = agent_fsm.tool_call_message
model = agent_fsm.ScriptedModel(
    [
        call("call_1", "lookup_order", {"order_id": "A-17"}),
        call("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 9999}),
        agent_fsm.answer_message("Refunded 4999 cents."),
    ],
    reactions={"denied": call("call_3", "refund_order", {"order_id": "A-17", "amount_cents": 4999})},
)
assert agent_fsm.run(TASK, model, make_support_desk().tools, gate=refund_gate).stop == "answered"
print(imported, time.perf_counter() - t)
"""


def _fresh_env(cache_bytecode: bool) -> dict[str, str]:
    """The environment of a fresh interpreter importing the very agent_fsm measured here."""
    import agent_fsm

    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(agent_fsm.__file__))
    if cache_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure_import(times: int, *, cache_bytecode: bool = False) -> dict[str, float]:
    """
    Median seconds of ``import agent_fsm`` and of import plus a first run, each in a fresh interpreter.

    With ``cache_bytecode`` the interpreters may write and read ``__pycache__`` (``PYTHONDONTWRITEBYTECODE``
    removed from their environment) and one untimed interpreter warms the cache first: the import a user's
    second process sees. Otherwise they inherit the environment's setting.
    """
    env = _fresh_env(cache_bytecode)

    def fresh() -> tuple[float, float]:
        out = subprocess.run([sys.executable, "-c", _FRESH], env=env, capture_output=True, text=True, check=True)
        imported, ran = map(float, out.stdout.split())
        return imported, ran

    if cache_bytecode:
        fresh()
    imports, first = [], []
    for _ in range(times):
        imported, ran = fresh()
        imports.append(imported)
        first.append(ran)
    return {
        "import": statistics.median(imports),
        "import_min": min(imports),
        "first_run": statistics.median(first),
        "first_run_min": min(first),
    }


SCHEMA_LIBRARIES = ("jsonschema", "pydantic", "fastjsonschema", "referencing")
# A plain run: tools declared in the shorthand, no JSON Schema anywhere (tests/test_import_lazy.py's run).
_PLAIN_RUN = """
import sys
import agent_fsm as a
tools = {"add": a.ToolSpec("Add two numbers.", {"x": int, "y": int}, lambda x, y: x + y)}
model = a.ScriptedModel([a.tool_call_message("c1", "add", {"x": 1, "y": 2}), a.answer_message("3")])
assert a.run("add", model, tools, gate=a.allow_all).answer == "3"
loaded = {m.split(".")[0] for m in sys.modules}
print(" ".join(n for n in %r if n in loaded))
"""


def schema_libraries_loaded() -> list[str]:
    """The schema libraries a plain run on shorthand tools loads, in a fresh interpreter: none is expected."""
    program = _PLAIN_RUN % (SCHEMA_LIBRARIES,)
    out = subprocess.run(
        [sys.executable, "-c", program], env=_fresh_env(False), capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def _check_concurrent(outcome: Outcome) -> None:
    if outcome.stop != "answered" or outcome.effects != [{"order_id": "A-17", "refunded_cents": 4999}]:
        raise Mismatch(f"a concurrent run ended {outcome.stop} with effects {outcome.effects}")


def concurrent_wall(contestant: Contestant, count: int, use_async: bool) -> float:
    """Seconds for ``count`` over-reach runs at once, each model call taking 5 ms."""
    scenario = scenarios(1)[0]
    jobs = [new_job(scenario, LATENCY) for _ in range(count)]
    outcomes: list[Outcome] = []
    gc.collect()
    if use_async:
        afn = contestant.asynchronous
        assert afn is not None

        async def everything() -> float:
            begin = time.perf_counter()
            outcomes.extend(await asyncio.gather(*(afn(job) for job in jobs)))
            return time.perf_counter() - begin

        wall = asyncio.run(everything())
    else:
        fn = contestant.sync
        assert fn is not None
        go = threading.Event()

        def one(job: Job) -> None:
            go.wait()
            outcomes.append(fn(job))

        # Every thread is started and waiting before the clock starts: what is
        # timed is the runs, not the creation of a thousand threads.
        threads = [threading.Thread(target=one, args=(job,)) for job in jobs]
        for thread in threads:
            thread.start()
        start = time.perf_counter()
        go.set()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - start
    if len(outcomes) != count:
        raise Mismatch(f"{contestant.name}: {len(outcomes)} of {count} concurrent runs finished")
    for outcome in outcomes:
        _check_concurrent(outcome)
    return wall


SLOW_WALL = 2.0  # seconds: a contestant this far behind is measured once, not every round


def measure_concurrency(contestants: Sequence[Contestant], count: int, rounds: int) -> list[tuple[str, str, float]]:
    """
    Median wall time of ``count`` concurrent runs: threads for sync contestants, asyncio for async ones.

    A contestant whose first round takes over ``SLOW_WALL`` seconds is not
    run again: it is many times slower than the bare loop, so more rounds
    would only add minutes, not change what the figure says.
    """
    entries = [(c, "threads", False) for c in contestants if c.sync is not None and not c.async_native]
    entries += [(c, "asyncio", True) for c in contestants if c.asynchronous is not None]
    walls: dict[int, list[float]] = {i: [] for i in range(len(entries))}
    for index in range(rounds):
        order = list(range(len(entries)))
        order = order[index % len(order) :] + order[: index % len(order)]
        for i in order:
            if index and walls[i][0] > SLOW_WALL:
                continue
            contestant, _, use_async = entries[i]
            walls[i].append(concurrent_wall(contestant, count, use_async))
    return [(c.name, how, statistics.median(walls[i])) for i, (c, how, _) in enumerate(entries)]
