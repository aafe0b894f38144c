"""
Engine overhead against a bare loop doing the same work, measured in one process.

Not a test: it prints ratios. The bare loop below uses the same parser,
validator, gate, handlers, tool messages and incremental token count as the
engine, so the difference is the cost of the explicit machine (transitions
events, guards, state callbacks). A third contender builds a ``transitions``
Machine for every run, the design agent_fsm avoids, to show why.

    python bench/bench_engine.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from transitions import Machine

from agent_fsm import (
    Limits,
    RunState,
    ScriptedModel,
    ask_for_effects,
    estimate_tokens,
    run,
)
from agent_fsm.engine import (
    Observation,
    answer_message,
    execute,
    function_declarations,
    judge,
    normalise_reply,
    tool_call_message,
    tool_message,
)
from agent_fsm.examples.support_desk import make_support_desk, refund_gate

TASK = "My order A-17 came broken. Could you sort this out?"


# --- scenarios: (name, model factory, limits, gate factory) ---------------------


def wanderer() -> ScriptedModel:
    again = tool_call_message("w", "lookup_order", {"order_id": "A-17"})
    return ScriptedModel([again], reactions={"order_id": again})


def overreach() -> ScriptedModel:
    return ScriptedModel(
        [
            tool_call_message("c1", "lookup_order", {"order_id": "A-17"}),
            tool_call_message("c2", "refund_order", {"order_id": "A-17", "amount_cents": 9999}),
            answer_message("Refunded 4999 cents."),
        ],
        reactions={"denied": tool_call_message("c3", "refund_order", {"order_id": "A-17", "amount_cents": 4999})},
    )


SCENARIOS: list[tuple[str, Callable[[], ScriptedModel], Limits]] = [
    ("overreach (4 turns)", overreach, Limits()),
    ("wanderer (40 turns)", wanderer, Limits(max_turns=40, max_prompt_tokens=10**9)),
    ("wanderer (200 turns)", wanderer, Limits(max_turns=200, max_prompt_tokens=10**9)),
]


# --- the bare loop: the same work with no machine ----------------------------------


def bare_loop(task: str, model: Any, tools: Any, gate: Any, limits: Limits) -> dict[str, Any]:
    """A hand-written while loop with the engine's semantics (budgets first, one boundary)."""
    messages: list[dict[str, Any]] = []
    tokens = 0
    for message in (
        {"role": "system", "content": "You act only through the tools."},
        {"role": "user", "content": task},
    ):
        messages.append(message)
        tokens += estimate_tokens(message)
    declarations = function_declarations(tools)
    fixed = sum(estimate_tokens(d) for d in declarations)
    observations: list[Observation] = []
    log: list[int] = []
    denials: dict[str, int] = {}
    turns = attempts = 0
    while True:
        if turns >= limits.max_turns:
            return {"stop": "step_limit", "messages": messages, "observations": observations}
        prompt = tokens + fixed
        if prompt > limits.max_prompt_tokens:
            return {"stop": "token_limit", "messages": messages, "observations": observations}
        log.append(prompt)
        turns += 1
        reply, calls = normalise_reply(model.chat(messages, declarations), turns)
        messages.append(reply)
        tokens += estimate_tokens(reply)
        if not calls:
            return {"stop": "answered", "messages": messages, "observations": observations}
        while calls:
            call = calls[0]
            verdict = judge(call, tools, gate)
            if verdict.kind == "ask":
                return {
                    "stop": "awaiting_approval",
                    "messages": messages,
                    "observations": observations,
                    "pending": calls,
                    "log": log,
                    "denials": denials,
                    "turns": turns,
                    "attempts": attempts,
                }
            if verdict.kind == "allow":
                attempts += 1
                observation = execute(call, tools)
            else:
                observation = Observation(call.call_id, False, verdict.kind, verdict.reason)
                key = call.fingerprint()
                denials[key] = denials.get(key, 0) + 1
            observations.append(observation)
            message = tool_message(observation)
            messages.append(message)
            tokens += estimate_tokens(message)
            calls.pop(0)
            if observation.kind in ("denied", "invalid") and denials[call.fingerprint()] >= limits.repeated_denials:
                return {"stop": "no_progress", "messages": messages, "observations": observations}


def machine_per_run(task: str, model: Any, tools: Any, gate: Any, limits: Limits) -> None:
    """The engine's run, preceded by what a Machine-per-run design pays: building one and attaching the run."""

    class Holder:
        pass

    Machine(
        model=Holder(),
        states=[s.name for s in __import__("agent_fsm").RUN_MACHINE.states],
        transitions=[
            {"trigger": e.event, "source": e.source, "dest": e.dest} for e in __import__("agent_fsm").RUN_MACHINE.edges
        ],
        initial="Ready",
        auto_transitions=False,
    )
    run(task, model, tools, gate=gate, limits=limits)


def engine(task: str, model: Any, tools: Any, gate: Any, limits: Limits) -> None:
    run(task, model, tools, gate=gate, limits=limits, system_prompt="You act only through the tools.")


def time_one(fn: Callable[..., Any], model_factory: Callable[[], ScriptedModel], limits: Limits, repeat: int) -> float:
    """Seconds per run, over ``repeat`` runs, each against a fresh environment."""
    desks = [make_support_desk() for _ in range(repeat)]
    models = [model_factory() for _ in range(repeat)]
    gc.collect()
    start = time.perf_counter()
    for desk, model in zip(desks, models):
        fn(TASK, model, desk.tools, refund_gate, limits)
    return (time.perf_counter() - start) / repeat


def paused_bytes(make_paused: Callable[[], Any], count: int = 200) -> float:
    """Bytes retained per paused run, kept alive in a list, measured with tracemalloc."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    kept = [make_paused() for _ in range(count)]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    del kept
    return size / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds per scenario (median reported)")
    args = parser.parse_args()
    print(
        f"{'scenario':24} {'bare µs/turn':>13} {'engine µs/turn':>15} {'engine/bare':>12} {'machine-per-run/bare':>21}"
    )
    for name, factory, limits in SCENARIOS:
        turns = run(TASK, factory(), make_support_desk().tools, gate=refund_gate, limits=limits).state.turns
        repeat = max(3, 400 // turns)
        bare, eng, per_run = [], [], []
        for _ in range(args.rounds):  # interleaved, so machine noise hits all three alike
            bare.append(time_one(bare_loop, factory, limits, repeat))
            eng.append(time_one(engine, factory, limits, repeat))
            per_run.append(time_one(machine_per_run, factory, limits, repeat))
        b, e, p = statistics.median(bare), statistics.median(eng), statistics.median(per_run)
        print(f"{name:24} {b / turns * 1e6:13.1f} {e / turns * 1e6:15.1f} {e / b:12.2f} {p / b:21.2f}")

    def engine_paused() -> RunState:
        desk = make_support_desk()
        model = ScriptedModel([tool_call_message("c1", "refund_order", {"order_id": "A-17", "amount_cents": 100})])
        return run(
            TASK, model, desk.tools, gate=ask_for_effects(desk.tools), system_prompt="You act only through the tools."
        ).state

    def bare_paused() -> dict[str, Any]:
        desk = make_support_desk()
        model = ScriptedModel([tool_call_message("c1", "refund_order", {"order_id": "A-17", "amount_cents": 100})])
        return bare_loop(TASK, model, desk.tools, ask_for_effects(desk.tools), Limits())

    assert engine_paused().machine_state == "AwaitingApproval" and bare_paused()["stop"] == "awaiting_approval"
    e_bytes, b_bytes = paused_bytes(engine_paused), paused_bytes(bare_paused)
    print(f"\npaused run retained: bare {b_bytes:,.0f} B, engine {e_bytes:,.0f} B, engine/bare {e_bytes / b_bytes:.2f}")


if __name__ == "__main__":
    main()
