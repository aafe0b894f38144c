"""Serve the inbox with uvicorn, on the loopback interface unless told otherwise."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

__all__ = ["is_loopback", "serve"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(app: Any, *, host: str = "127.0.0.1", port: int = 8765, sock: socket.socket | None = None) -> None:
    """
    Serve ``app`` until interrupted; on ``sock`` if given (already bound, e.g. to port 0 by a test).

    Needs the ``web`` extra (uvicorn).
    """
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    server.run(sockets=[sock] if sock is not None else None)
