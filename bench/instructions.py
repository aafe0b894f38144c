"""
Instructions per run, agent_fsm against the minimal bare loop: a figure the machine's load cannot move.

Not a test: it prints counts. On a shared machine the timed ratios of
``peers.py`` drift by a tenth from one run to the next; the number of
instructions a run executes does not. Each contestant runs ``--runs`` fresh
runs of a scenario inside ``valgrind --tool=callgrind`` (which counts every
user-space instruction), once more with no runs at all, and the difference
divided by the runs is one run's count. Runs are the ``peers.py`` scenarios
(the same desks, models, gate and verification), warmed up before counting.

Instructions are not time: a run that touches more memory or jumps less
predictably takes longer per instruction (the timed ratio of ``peers.py`` is
the one users feel). The count says where work was added or removed, exactly.

    python bench/instructions.py                 # about three minutes
    python bench/instructions.py --runs 20       # quicker, as exact
    python bench/instructions.py --async         # arun against the bare async loop instead
    python bench/instructions.py --saved         # the saved form: from_json, to_json, a stored run's commits

With ``--async`` the contestants are ``concurrent_runs.py``'s bare async loop
and ``agent_fsm.arun``: ``--runs`` over-reach runs gathered at once in one
event loop, each model call an ``asyncio.sleep`` of a microsecond (a real
timer, so the loop's own work is counted, and no time for the machine's
load to reorder anything).

With ``--saved`` the counts are the saved form's: ``RunState.from_json`` and
``to_json`` of the paused over-reach run, and the store's own work for one
stored over-reach run (SQLite's store with every statement a no-op, as
``bench_checkpoint.py``'s "store, no database", less the same run in
memory). Each is counted at ``--runs`` and at twice as many, and the
difference divided: the two programs differ in nothing but that number.

Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
COUNTED = re.compile(r"Collected\s*:\s*(\d+)")
CONTESTANTS = ("bare loop", "agent_fsm")
# Fewer runs of the long scenario: its run is fifty times the others'.
SHARE = {"overreach": 1.0, "wanderer": 0.05, "parallel": 1.0}

# The counted program: warm up, build ``built`` jobs (desks and models), then run ``runs`` of them.
# Both programs counted build the same jobs, so building them is not counted as the runs' work.
_PROGRAM = """
import sys
sys.path.insert(0, {here!r})
from peerbench.contestants import CONTESTANTS
from peerbench.scenarios import new_job, scenarios
contestant = next(c for c in CONTESTANTS if c.name == {name!r})
scenario = next(s for s in scenarios({turns}) if s.key == {key!r})
for _ in range(3):
    contestant.sync(new_job(scenario))
jobs = [new_job(scenario) for _ in range({built})]
for job in jobs[:{runs}]:
    contestant.sync(job)
"""


# The async program: ``runs`` of ``built`` jobs gathered at once in a fresh event loop.
_ASYNC_PROGRAM = """
import asyncio, sys
sys.path.insert(0, {here!r})
from peerbench.async_runs import ENTRIES
from peerbench.scenarios import new_job, scenarios
entry = next(e for e in ENTRIES if e.key == {name!r})
scenario = scenarios(1)[0]
for _ in range(3):
    asyncio.run(entry.run(new_job(scenario, 1e-6)))
jobs = [new_job(scenario, 1e-6) for _ in range({built})]
async def everything():
    await asyncio.gather(*(entry.run(job) for job in jobs[:{runs}]))
asyncio.run(everything())
"""
ASYNC_CONTESTANTS = ("bare", "agent_fsm")

# The saved form's program: ``runs`` reads or writes of a paused run's state, or ``runs`` over-reach runs
# stored in a store whose statements do nothing (``stored`` False: the same runs in memory).
_SAVED_PROGRAM = """
import sys, tempfile
from contextlib import contextmanager
from pathlib import Path
sys.path.insert(0, {here!r})
from peerbench.contestants.agent_fsm_ import agent_fsm_state
from peerbench.scenarios import PAUSED, new_job
from agent_fsm import RunState, run
from agent_fsm.examples.demo import TASK, overreaching_model
from agent_fsm.examples.support_desk import make_support_desk, refund_gate
from agent_fsm.store import SqliteStore
class NoStatement:
    def run(self, sql, params=()):
        return 1
    def rows(self, sql, params=()):
        return []
@contextmanager
def transaction(*, write=True, single=False):
    yield NoStatement()
store = SqliteStore(Path(tempfile.mkdtemp()) / "unused.db")
store._transaction = transaction
state = agent_fsm_state(new_job(PAUSED))
text = state.to_json()
made = {runs} + 3 if {key!r} == "store" else 3  # desks and models for the runs alone
desks = [make_support_desk() for _ in range(made)]
models = [overreaching_model() for _ in range(made)]
for i in range({runs} + 3):
    if i < 3 or {key!r} == "store":
        kept = store if {name!r} == "stored" else None
        run(TASK, models[i], desks[i].tools, gate=refund_gate, store=kept, run_id=f"r{{i}}")
    elif {key!r} == "from_json":
        RunState.from_json(text)
    elif {key!r} == "to_json":
        state.to_json()
"""


def saved(runs: int) -> dict[str, float]:
    """Instructions of one ``from_json`` and one ``to_json`` of a paused run, and of a stored run's store work."""

    def each(name: str, key: str) -> float:
        return (count(name, key, 0, 2 * runs, 0, _SAVED_PROGRAM) - count(name, key, 0, runs, 0, _SAVED_PROGRAM)) / runs

    return {
        "from_json, paused run": each("stored", "from_json"),
        "to_json, paused run": each("stored", "to_json"),
        "store work, stored run": each("stored", "store") - each("memory", "store"),
    }


def count(name: str, key: str, turns: int, runs: int, built: int, program: str = _PROGRAM) -> int:
    """Instructions valgrind counted for the program with ``runs`` runs (start-up and warm-up included)."""
    program = program.format(here=str(HERE), name=name, key=key, turns=turns, runs=runs, built=built)
    env = dict(os.environ, PYTHONHASHSEED="0")  # the same string hashes, so the same work, every time
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    found = COUNTED.search(done.stderr)
    if found is None:
        raise RuntimeError(f"valgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_run(name: str, key: str, turns: int, runs: int, program: str = _PROGRAM) -> float:
    return (count(name, key, turns, runs, runs, program) - count(name, key, turns, 0, runs, program)) / runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="runs counted per short scenario (default 100)")
    parser.add_argument("--turns", type=int, default=200, help="turns of the wanderer (default 200)")
    parser.add_argument("--async", dest="gathered", action="store_true", help="arun against the bare async loop")
    parser.add_argument("--saved", action="store_true", help="the saved form: from_json, to_json, a stored run")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    if args.saved:
        print(f"{'instructions':24}{'each':>14}")
        for what, figure in saved(args.runs).items():
            print(f"{what:24}{figure:14,.0f}")
        return 0
    if args.gathered:
        bare, engine = (per_run(name, "overreach", 1, args.runs, _ASYNC_PROGRAM) for name in ASYNC_CONTESTANTS)
        print(f"{'instructions per run':24}{'bare async':>14}{'agent_fsm arun':>16}{'ratio':>8}")
        print(f"{'over-reach, gathered':24}{bare:14,.0f}{engine:16,.0f}{engine / bare:7.2f}x")
        return 0
    sys.path.insert(0, str(HERE))
    from peerbench.scenarios import scenarios
    from peerbench.verification import reference

    print(f"{'instructions per run':24}{'bare loop':>14}{'agent_fsm':>14}{'ratio':>8}{'extra per turn':>16}")
    for scenario in scenarios(args.turns):
        runs = max(2, round(args.runs * SHARE.get(scenario.key, 1.0)))
        bare, engine = (per_run(name, scenario.key, args.turns, runs) for name in CONTESTANTS)
        turns = len(reference(scenario).prompt_log)
        extra = (engine - bare) / turns
        print(f"{scenario.title[:23]:24}{bare:14,.0f}{engine:14,.0f}{engine / bare:7.2f}x{extra:16,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
