"""
The crash harness, long: many rounds of SIGKILLed workers on SQLite and on a PostgreSQL server, then recovery.

Not a test (tests/test_store_crash.py runs a small round of the same
harness): it prints, per backend, how many runs were planned, how many
workers were killed (and how many of those inside a handler, between intent
and observation), how many runs recovery took over, how many pauses were
"outcome unknown", how many approval races were run (each must have exactly
one winner) and how many payments were made twice (must be 0). Any broken
guarantee stops it with an AssertionError. PostgreSQL is started in a
temporary directory (``initdb`` + ``pg_ctl``, as the tests do) and stopped.

    python bench/crash_harness.py [--rounds 10] [--runs 40] [--workers 8] [--backend sqlite|postgres|both]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' world and server helpers

from tests.crash_harness import Report, crash_and_recover
from tests.postgres_server import INSTALL_HINT, PostgresServer, find_bin


def _total(reports: list[Report], backend: str) -> Report:
    total = Report(backend=backend)
    for report in reports:
        for field in ("runs", "workers", "kills", "self_kills", "recovered", "outcome_unknown", "decisions"):
            setattr(total, field, getattr(total, field) + getattr(report, field))
        total.races += report.races
        total.race_losers += report.race_losers
        total.duplicates += report.duplicates
        total.seconds += report.seconds
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=40, help="runs per round")
    parser.add_argument("--workers", type=int, default=8, help="worker processes per round")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    args = parser.parse_args()
    server = None
    if args.backend in ("postgres", "both"):
        bin_dir = find_bin()
        if bin_dir is None:
            raise SystemExit(INSTALL_HINT)
        server = PostgresServer(bin_dir).start()
    try:
        for backend in ("sqlite", "postgres"):
            if args.backend not in (backend, "both"):
                continue
            reports = []
            for seed in range(args.rounds):
                folder = Path(tempfile.mkdtemp(prefix="agent-fsm-crash-"))
                url = f"sqlite:///{folder / 'runs.db'}" if backend == "sqlite" else server.new_database()  # type: ignore[union-attr]
                report = crash_and_recover(
                    url, folder / "ledger", runs=args.runs, workers=args.workers, seed=seed, backend=backend
                )
                print("  round", seed, report.line(), flush=True)
                reports.append(report)
            print(_total(reports, backend).line(), flush=True)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
