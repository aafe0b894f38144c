"""A served agent for the tests: the ledger or the shop in this process, or ``agent-fsm serve`` of its own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx

from agent_fsm import Agent
from agent_fsm.serve import Clients, serve_app
from agent_fsm.store import open_store
from tests.ledger_world import ledger_agent
from tests.person_world import shop_agent
from tests.web_server import serving

ROOT = Path(__file__).resolve().parents[1]


def sse_events(lines: Iterable[str], count: int | None = None) -> list[dict[str, Any]]:
    """The events of an SSE stream's ``lines`` (the first ``count``), each its data with its ``id`` and ``event``."""
    got: list[dict[str, Any]] = []
    fields: dict[str, str] = {}
    for line in lines:
        if line:
            key, _, value = line.partition(": ")
            fields[key] = value
            continue
        if "data" in fields:
            got.append({"id": fields["id"], "event": fields["event"], **json.loads(fields["data"])})
            if len(got) == count:
                break
        fields = {}
    return got


def served_ledger(folder: Path, clients: Clients) -> AbstractContextManager[tuple[str, Path]]:
    """The ledger agent served on 127.0.0.1 over a SQLite file in ``folder``: (base URL, ledger)."""
    return _served(ledger_agent, folder / "ledger.jsonl", clients)


def served_shop(folder: Path, clients: Clients) -> AbstractContextManager[tuple[str, Path]]:
    """The shop whose question a person answers, served over a SQLite file in ``folder``: (base URL, its writes)."""
    return _served(shop_agent, folder / "written.txt", clients)


@contextmanager
def _served(world: Callable[[Path], Agent], effects: Path, clients: Clients) -> Iterator[tuple[str, Path]]:
    url = f"sqlite:///{effects.parent / 'runs.db'}"
    with serving(serve_app(world(effects), lambda: open_store(url), clients=clients, workers=2)) as base:
        yield base, effects


@contextmanager
def serve_process(
    store_url: str | None, env: Mapping[str, str], *options: str, world: str = "tests.serve_world:agent"
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """
    Start ``agent-fsm serve`` of ``world`` with ``env`` added; yield its base URL and process once it answers.

    ``store_url`` None: the ``options`` say where runs are (``--temporal ...``).
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    command = [
        sys.executable,
        "-m",
        "agent_fsm.cli",
        "serve",
        *(("--store", store_url) if store_url is not None else ()),
        "--world",
        world,
    ]
    process = subprocess.Popen(
        [*command, "--port", str(port), *options],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
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
