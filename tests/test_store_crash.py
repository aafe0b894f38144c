"""The crash harness, small: SIGKILLed workers on SQLite and on a real PostgreSQL server, then recovery (bounded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash_harness import crash_and_recover


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL for each backend, on a database of its own."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


@pytest.mark.parametrize("seed", [1, 2])
def test_killed_workers_lose_no_run_and_double_no_effect(store_url: str, tmp_path: Path, seed: int) -> None:
    """Every run ends, no payment is made twice, receipts repeat only under one key, races have one winner."""
    report = crash_and_recover(store_url, tmp_path / "ledger", runs=16, workers=6, seed=seed, backend=store_url[:6])
    print(report.line())
    assert report.self_kills == 3 and report.kills >= 3  # killed inside a handler, between intent and observation
    assert report.outcome_unknown >= 1  # each seed kills at least one payment in flight
    assert report.recovered >= 3 and report.duplicates == 0
    assert report.races >= 1 and report.race_losers == report.races
