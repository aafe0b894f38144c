"""``agent-fsm serve`` in a process of its own on a free 127.0.0.1 port, serving tests/serve_world.py's agent."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def serve_process(store_url: str, env: Mapping[str, str], *options: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start ``agent-fsm serve`` with ``env`` added; yield its base URL and process once it answers; stop it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    command = [
        sys.executable,
        "-m",
        "agent_fsm.cli",
        "serve",
        "--store",
        store_url,
        "--world",
        "tests.serve_world:agent",
    ]
    process = subprocess.Popen(
        [*command, "--port", str(port), *options],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(base + "/.well-known/agent-card.json", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and process.poll() is None, "the server did not start"
                time.sleep(0.1)
        yield base, process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=20)
