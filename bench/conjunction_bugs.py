"""
Seeded bugs behind conjunctions of three or four conditions: how often the kit finds each, at default settings.

Not a test: it prints, per world, how many of N random seeds found the bug,
the median seconds per check, and the boundaries the coverage report left
unreached when the bug was missed. The worlds are in tests/worlds/
(meetings, freight, transfers).

    python bench/conjunction_bugs.py [--seeds 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

from agent_fsm.testing import InvariantViolation, check_gate_contains, default_settings
from tests.worlds import freight, meetings, transfers

WORLDS = {"meetings": meetings, "freight": freight, "transfers": transfers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--seeds", type=int, default=20)
    arguments = parser.parse_args()
    for name, world in WORLDS.items():
        found, seconds, missed = 0, [], set()
        for _ in range(arguments.seeds):
            started = time.perf_counter()
            try:
                coverage = check_gate_contains(
                    world.buggy_gate, world.make_world, world.forbidden, settings=default_settings(database=None)
                )
            except InvariantViolation as exc:
                found += exc.invariant == "forbidden_effect"
            else:
                missed |= {f"{k}: never {v}" for k, v in coverage.missing_boundaries.items()}
            seconds.append(time.perf_counter() - started)
        median = statistics.median(seconds)
        print(f"{name:<10} found in {found} of {arguments.seeds} seeds; median {median:.2f} s per check")
        for line in sorted(missed)[:6]:
            print(f"    unreached when missed: {line}")


if __name__ == "__main__":
    main()
