"""
The crash harness: worker processes run ledger runs against a store and are killed with SIGKILL; then recovery.

Some workers kill themselves at a chosen moment inside a handler (after the
intent is committed, before or after the effect: the window that matters);
the others are killed from outside at random times. Then ``recover`` takes
the runs over, a "person" decides every pause (two processes racing on
each of some of them), and the ledger and the store are checked:

* no run lost: every run planned ends (after its decisions);
* no payment (not idempotent) made twice;
* every receipt (idempotent) that ran more than once ran under one key;
* every "outcome unknown" pause names a call whose intent was committed and
  whose observation was not, in a run whose worker was killed.

Run by tests/test_store_crash.py (small) and bench/crash_harness.py (long).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import attrs

from agent_fsm.store import OUTCOME_UNKNOWN, AlreadyDecided, RunStore, approve, open_store, recover, reject
from tests.ledger_world import ledger_agent, read_ledger, task_for

__all__ = ["Report", "crash_and_recover"]

DIE_MODES = ["before:pay", "before:send_receipt", "after:pay", "after:send_receipt"]
_FORK = multiprocessing.get_context("fork")  # workers start in milliseconds and inherit the test's imports


@attrs.define
class Report:
    """What one harness round did and found."""

    backend: str
    runs: int = 0
    workers: int = 0
    kills: int = 0
    self_kills: int = 0
    recovered: int = 0
    outcome_unknown: int = 0
    decisions: int = 0
    races: int = 0
    race_losers: int = 0
    duplicates: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"{self.backend}: runs={self.runs} workers={self.workers} kills={self.kills}"
            f" (in a handler: {self.self_kills}) recovered={self.recovered} outcome_unknown={self.outcome_unknown}"
            f" decisions={self.decisions} races={self.races} (one winner each) duplicates={self.duplicates}"
            f" in {self.seconds:.1f}s"
        )


def _invoices(index: int) -> list[str]:
    names = [f"I{index}a", f"I{index}b"]
    if index % 4 == 3:
        names[1] = f"BIG-{index}"  # the gate asks a person about this one
    return names


def _worker(url: str, ledger: str, run_ids: list[int], die: str | None, token: str) -> None:
    store = open_store(url)
    agent = ledger_agent(Path(ledger), die=die, token=token)
    for index in run_ids:
        agent.run(task_for(_invoices(index)), store=store, run_id=f"run-{index}")
    store.close()


def _racer(url: str, ledger: str, run_id: str, reviewer: str, barrier: Any, results: Any) -> None:
    store = open_store(url)
    barrier.wait()
    try:
        approve(store, run_id, ledger_agent(Path(ledger)), reviewer=reviewer)
        results.put((run_id, reviewer, "won"))
    except AlreadyDecided:
        results.put((run_id, reviewer, "refused"))
    except BaseException as exc:  # any other ending is the finding: said, not left as a queue that times out
        results.put((run_id, reviewer, f"raised {exc!r}"))
        raise
    finally:
        store.close()


def _race(url: str, ledger: Path, run_id: str) -> list[tuple[str, str, str]]:
    barrier, results = _FORK.Barrier(2), _FORK.Queue()
    racers = [_FORK.Process(target=_racer, args=(url, str(ledger), run_id, name, barrier, results)) for name in "ab"]
    for racer in racers:
        racer.start()
    outcomes = [results.get(timeout=60) for _ in racers]
    for racer in racers:
        racer.join(60)
    return outcomes


def _decide(store: RunStore, url: str, ledger: Path, report: Report, interrupted: set[str]) -> None:
    """A person works through the inbox: checks the ledger for an unknown outcome, races approvals on the others."""
    agent = ledger_agent(ledger)
    for waiting in store.paused():
        report.decisions += 1
        if (waiting.reason or "").startswith(OUTCOME_UNKNOWN):
            report.outcome_unknown += 1
            [effect] = [e for e in store.effects(waiting.run_id) if e.outcome == "interrupted"][-1:]
            assert effect.call_id == (waiting.blocked.call_id if waiting.blocked else None), waiting
            assert waiting.run_id in interrupted, f"{waiting.run_id} paused 'outcome unknown' but was never killed"
            done = {(e["key"]) for e in read_ledger(ledger) if e["event"] == "effect"}
            if effect.idempotency_key in done:
                reject(store, waiting.run_id, agent, reviewer="p", reason="it is paid")
            else:
                approve(store, waiting.run_id, agent, reviewer="p")
        else:
            outcomes = _race(url, ledger, waiting.run_id)
            report.races += 1
            assert sorted(o[2] for o in outcomes) == ["refused", "won"], outcomes
            report.race_losers += 1


def crash_and_recover(url: str, ledger: Path, *, runs: int, workers: int, seed: int, backend: str) -> Report:
    """One round: start, kill, recover, decide, check. Raises AssertionError on any broken guarantee."""
    started = time.perf_counter()
    rng = random.Random(seed)
    report = Report(backend=backend, runs=runs, workers=workers)
    plan = [list(range(w, runs, workers)) for w in range(workers)]
    processes = []
    for w, run_ids in enumerate(plan):
        die = DIE_MODES[(w // 2 + seed) % len(DIE_MODES)] if w % 2 == 0 else None
        processes.append(_FORK.Process(target=_worker, args=(url, str(ledger), run_ids, die, f"w{w}")))
    for process in processes:
        process.start()
    for w, process in enumerate(processes):
        # Odd workers are killed from outside at a random moment (most of them); even ones kill themselves.
        if w % 2 == 1 and rng.random() < 0.8:
            time.sleep(rng.uniform(0.0, 0.15))
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signal.SIGKILL)
    killed_workers = set()
    for w, process in enumerate(processes):
        process.join(120)
        if process.exitcode == -signal.SIGKILL:
            killed_workers.add(w)
        else:  # a worker that was not killed must have finished cleanly: anything else is a bug found
            assert process.exitcode == 0, f"worker {w} failed on its own (exit code {process.exitcode})"
    report.kills = len(killed_workers)
    report.self_kills = sum(1 for e in read_ledger(ledger) if e["event"] == "killed")
    interrupted = {f"run-{i}" for w in killed_workers for i in plan[w]}

    store = open_store(url)
    begun = {s.run_id for s in store.runs()}
    agent = ledger_agent(ledger)
    recovered = recover(store, agent, older_than=0)
    assert all(r.error is None for r in recovered), [r.error for r in recovered if r.error]
    report.recovered = len(recovered)
    # Runs whose worker died before beginning them were never stored: start them now (nothing to recover).
    for index in range(runs):
        if f"run-{index}" not in begun:
            agent.run(task_for(_invoices(index)), store=store, run_id=f"run-{index}")
    for _ in range(6):  # a decision may lead to the next pause of the same run
        if not store.paused():
            break
        _decide(store, url, ledger, report, interrupted)

    statuses = Counter(s.status for s in store.runs())
    assert statuses == {"ended": runs}, f"runs lost or left waiting: {statuses}"
    assert all(s.stop == "answered" for s in store.runs()), Counter(s.stop for s in store.runs())
    effects = [e for e in read_ledger(ledger) if e["event"] == "effect"]
    payments = Counter((e["run"], e["args"]["invoice"]) for e in effects if e["tool"] == "pay")
    report.duplicates = sum(n - 1 for n in payments.values() if n > 1)
    assert report.duplicates == 0, [k for k, n in payments.items() if n > 1]
    keys: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in effects:
        if e["tool"] == "send_receipt":
            keys[(e["run"], e["args"]["invoice"])].add(e["key"])
    assert all(len(k) == 1 for k in keys.values()), {k: v for k, v in keys.items() if len(v) > 1}
    expected = {(f"run-{i}", name) for i in range(runs) for name in _invoices(i)}
    assert set(payments) == expected and set(keys) == expected, "every invoice is paid and receipted once"
    store.close()
    report.seconds = time.perf_counter() - started
    return report
