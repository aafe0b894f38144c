"""
What a screen costs per turn: a run with no screen, with an empty one, and with the shipped ones.

Not a test: it prints times and ratios. Each run is ``--turns`` turns of one
call to an effect-free lookup and its observation, then an answer; the
model is scripted, so the figures are the engine's own work. Contestants:

* no screen: the run as it always was (the screening edges' guards are
  tried and fail: one attribute read each);
* an empty input and result screen (``lambda ...: None``): each observation
  goes through ``ScreeningResult`` and its verdict is recorded;
* the shipped :func:`agent_fsm.screens.injection_screen` and
  :func:`agent_fsm.screens.secret_redactor`, in order, on a 300-character result.

The best of ``--rounds`` rounds is kept (the least disturbed by the machine's
other work); "extra per turn" is the difference from no screen, divided by
the turns. Whether a run *without* screens got slower than before screens
existed is the question of ``bench/instructions.py``, run on two checkouts.

    python bench/screens.py [--runs 200] [--turns 8] [--rounds 7]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Sequence
from typing import Any

from agent_fsm import Agent, ScriptedModel, ToolSpec, answer_message, tool_call_message
from agent_fsm.screens import in_order, injection_screen, secret_redactor

_PAGE = (
    "Order A-17 was delivered on the 3rd; the customer reports the parcel arrived damaged and asks what "
    "can be done. The policy allows a refund of the amount paid within thirty days of delivery, after a "
    "lookup of the order; partial refunds need a person's approval. Notes: none. Status: open. Priority: normal."
)


def _lookup(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "page": _PAGE}


TOOLS = {"lookup": ToolSpec("Look an order up.", {"order_id": str}, _lookup)}


def _none(subject: Any, state: Any) -> None:
    return None


CONTESTANTS: dict[str, dict[str, Any]] = {
    "no screen": {},
    "empty screens": {"screen_input": _none, "screen_result": _none},
    "shipped screens": {"screen_result": in_order(secret_redactor("hunter22"), injection_screen())},
}


def _script(turns: int) -> list[dict[str, Any]]:
    calls = [tool_call_message(f"c{i}", "lookup", {"order_id": f"A-{i}"}) for i in range(turns)]
    return [*calls, answer_message("Done.")]


def per_run(screens: dict[str, Any], runs: int, turns: int, rounds: int) -> float:
    """Best seconds per run over ``rounds`` rounds of ``runs`` runs."""
    script = _script(turns)
    agents = [Agent(ScriptedModel(script), TOOLS, **screens) for _ in range(runs)]
    agents[0].run("Warm up.")
    best = float("inf")
    for _ in range(rounds):
        fresh = [agent.replace(model=ScriptedModel(script)) for agent in agents]
        gc.collect()
        start = time.perf_counter()
        for agent in fresh:
            agent.run("Handle the orders.")
        best = min(best, (time.perf_counter() - start) / runs)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per round (default 200)")
    parser.add_argument("--turns", type=int, default=8, help="tool turns per run (default 8)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds, the best kept (default 7)")
    args = parser.parse_args(argv)
    times = {name: per_run(screens, args.runs, args.turns, args.rounds) for name, screens in CONTESTANTS.items()}
    base = times["no screen"]
    print(f"{args.turns} tool turns per run, best of {args.rounds} rounds of {args.runs} runs")
    print(f"{'contestant':18}{'us per run':>12}{'ratio':>8}{'extra us per turn':>20}")
    for name, seconds in times.items():
        extra = (seconds - base) / args.turns * 1e6
        print(f"{name:18}{seconds * 1e6:12.1f}{seconds / base:7.2f}x{extra:20.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
