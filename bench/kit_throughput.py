"""
The testing kit's throughput: checked runs per second for check_gate_contains on the support desk,
and what building a world costs per example.

Not a test: it prints figures. A checked run is one whole run of a drawn
model against a newly built desk, with the gate, the forbidden-effect check
and the run invariants; the world is built afresh for every example (its
effect log must start empty), so its cost is paid once per run.

    python bench/kit_throughput.py [--examples 300]
"""

from __future__ import annotations

import argparse
import time
import timeit

from agent_fsm import ScriptedModel, answer_message, run, tool_call_message
from agent_fsm.examples.support_desk import AUTO_REFUND_LIMIT_CENTS, make_support_desk, refund_gate
from agent_fsm.testing import check_gate_contains, default_settings

LOOKUP = tool_call_message("c1", "lookup_order", {"order_id": "A-17"})


def _over_limit(call) -> bool:
    return call.name == "refund_order" and (call.arguments or {}).get("amount_cents", 0) > AUTO_REFUND_LIMIT_CENTS


def _us(function, number: int) -> float:
    return min(timeit.repeat(function, number=number, repeat=5)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description="kit throughput on the support desk")
    parser.add_argument("--examples", type=int, default=300)
    arguments = parser.parse_args()
    settings = default_settings(max_examples=arguments.examples, database=None, derandomize=True)
    started = time.perf_counter()
    coverage = check_gate_contains(refund_gate, make_support_desk, _over_limit, settings=settings)
    elapsed = time.perf_counter() - started
    print(f"check_gate_contains on the support desk: {coverage.runs} checked runs in {elapsed:.2f} s")
    print(f"  {coverage.runs / elapsed:.0f} checked runs per second (search, enumeration and targeting included)")
    build = _us(make_support_desk, 2000)
    desk = make_support_desk()
    bare = _us(
        lambda: run("Look A-17 up.", ScriptedModel([LOOKUP, answer_message("A-17 is damaged.")]), desk.tools), 2000
    )
    print(f"building a desk (three ToolSpecs): {build:.1f} us per example")
    print(f"a bare two-turn run on a built desk: {bare:.1f} us  (building / run = {build / bare:.2f})")


if __name__ == "__main__":
    main()
