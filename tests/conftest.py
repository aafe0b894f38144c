"""Shared test configuration: Hypothesis profiles sized so the whole suite stays fast, and external programs."""

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from agent_fsm.examples.demo import TASK
from agent_fsm.examples.durable import world
from agent_fsm.store import PostgresStore, RunStore, SqliteStore
from tests.step_watchdog import pytest_runtest_protocol
from tests.system_parts import unavailable

__all__ = ["pytest_runtest_protocol"]  # the step watchdog, on every item collected here

# "ci" is used when CI is set (as it is in .ci/run); "dev" for a quick local loop;
# "thorough" for a long hunt: HYPOTHESIS_PROFILE=thorough python -m pytest
settings.register_profile("ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=5000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="session")
def graphviz_dot() -> str:
    """Graphviz's ``dot``: tests that draw with it skip without it, except under CI, where they fail."""
    dot = shutil.which("dot")
    if dot is None:
        reason = "Graphviz's `dot` is not installed: apt-get install graphviz (.ci/run does)"
        unavailable(reason)
    return dot


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server for the session; skips without one, except under CI, where it fails."""
    from tests.postgres_server import INSTALL_HINT, PostgresServer, find_bin

    bin_dir = find_bin()
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing = "psycopg is not installed: pip install -e '.[test]' (or the postgres extra)"
    else:
        missing = INSTALL_HINT if bin_dir is None else ""
    if missing:
        unavailable(missing)
    assert bin_dir is not None
    server = PostgresServer(bin_dir).start()
    yield server
    server.stop()


@pytest.fixture
def postgres_dsn(postgres_server) -> str:
    """A fresh database on the session's PostgreSQL server."""
    return postgres_server.new_database()


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    """Debian's chromium and chromium-driver (browser tests skip without them, except under CI, where they fail)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    missing = ""
    if browser is None or driver is None:
        missing = (
            "chromium and chromium-driver are not installed: apt-get install chromium chromium-driver (.ci/run does)"
        )
    else:
        try:
            import selenium  # noqa: F401
        except ImportError:
            missing = "selenium is not installed: pip install -e '.[test]'"
    if missing:
        unavailable(missing)
    assert browser is not None and driver is not None
    return browser, driver


@pytest.fixture(scope="session")
def temporal_server():
    """A real Temporal dev server for the session; skips without the CLI, except under CI, where it fails."""
    from tests.temporal_server import INSTALL_HINT, TemporalServer, find_cli

    cli = find_cli()
    try:
        import temporalio  # noqa: F401
    except ImportError:
        missing = "temporalio is not installed: pip install -e '.[test]' (or the temporal extra)"
    else:
        missing = INSTALL_HINT if cli is None else ""
    if missing:
        unavailable(missing)
    assert cli is not None
    server = TemporalServer(cli).start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], RunStore]:
    """
    Opens a new store object on one database: SQLite on disk, or the real PostgreSQL server.

    Each call is a new connection and owner, as another process would have.
    """
    if request.param == "sqlite":
        path = tmp_path / "runs.db"
        return lambda: SqliteStore(path)
    dsn = request.getfixturevalue("postgres_dsn")
    return lambda: PostgresStore(dsn)


@pytest.fixture
def paused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A store URL holding ticket-1 of the durable example, paused on a 9999-cent refund (the CLI tests' store)."""
    monkeypatch.setenv("AGENT_FSM_REFUNDS", str(tmp_path / "refunds.jsonl"))
    world().run(TASK, store=SqliteStore(tmp_path / "runs.db"), run_id="ticket-1")
    return f"sqlite:///{tmp_path / 'runs.db'}"
