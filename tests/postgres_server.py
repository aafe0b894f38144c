"""
A real PostgreSQL server for the tests: ``initdb`` and ``pg_ctl`` in a temporary directory, on a free loopback port.

PostgreSQL refuses to run as root, so under root the server runs as the
unprivileged ``postgres`` user (Debian's package creates it), or ``nobody``,
in a directory that user owns. Used by the ``postgres_dsn`` fixture and by
bench/crash_harness.py.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

__all__ = ["INSTALL_HINT", "PostgresServer", "find_bin"]

INSTALL_HINT = "PostgreSQL is not installed: apt-get install postgresql (.ci/run does), then the tests start their own"


def find_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (Debian keeps them out of PATH), or ``None``."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PostgresServer:
    """
    One throw-away server; ``dsn(database)`` names a database on it.

    ``durable`` flushes its log to disk at every commit (fsync on), as in
    production; by default it does not, which is all the tests need.
    """

    def __init__(self, bin_dir: Path, *, durable: bool = False) -> None:
        self.bin_dir = bin_dir
        self.durable = durable
        self.root = Path(tempfile.mkdtemp(prefix="agent-fsm-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._prefix: list[str] = []
        if os.geteuid() == 0:
            user = "postgres" if _has_user("postgres") else "nobody"
            entry = pwd.getpwnam(user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self._prefix = ["runuser", "-u", user, "--"]

    def _run(self, *args: str) -> None:
        subprocess.run([*self._prefix, *args], check=True, capture_output=True, cwd=self.root, timeout=120)

    def start(self) -> PostgresServer:
        unsynced = () if self.durable else ("--no-sync",)
        self._run(str(self.bin_dir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "agent_fsm", *unsynced)
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
        options += "" if self.durable else " -c fsync=off -c max_connections=200"
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "start",
        )
        return self

    def stop(self) -> None:
        try:
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://agent_fsm@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database on the server; its DSN."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn(), autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return self.dsn(name)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
