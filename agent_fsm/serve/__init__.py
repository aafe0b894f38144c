"""
Serving: runs started, streamed and decided over HTTP.

    from agent_fsm.serve import Clients, serve_app
    app = serve_app(agent, lambda: open_store("sqlite:///runs.db"), clients=Clients.from_environment())

An application beside :mod:`agent_fsm.web` (the ``serve`` extra: Starlette
and uvicorn). Runs are begun in the store before the caller is answered and
driven by a bounded pool of threads; their events are one stream
(:mod:`agent_fsm.serve.stream`) that each protocol adapts; decisions go
through the store's (:func:`agent_fsm.store.approve`, :func:`agent_fsm.store.reject`),
judged afresh by the agent's gate. ``agent-fsm serve`` serves one agent.
See docs/serving.md.
"""

from agent_fsm.serve.app import GC_THRESHOLD, serve_app, settle_gc
from agent_fsm.serve.clients import CLIENTS_VARIABLE, SCOPES, Client, Clients, ClientsMissing
from agent_fsm.serve.core import MAX_BODY, Refused
from agent_fsm.web.serve import is_loopback, serve

__all__ = [
    "CLIENTS_VARIABLE",
    "GC_THRESHOLD",
    "MAX_BODY",
    "SCOPES",
    "Client",
    "Clients",
    "ClientsMissing",
    "Refused",
    "is_loopback",
    "serve",
    "serve_app",
    "settle_gc",
]
