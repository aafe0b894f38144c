"""
``agent-fsm serve --world MODULE:NAME --store URL``: the agent's runs started, streamed and decided over HTTP.

Clients are named with their tokens and scopes in ``AGENT_FSM_CLIENTS``
(``name:token:start+read+decide``, tokens of 16 characters or more);
without it the server does not start. It listens on 127.0.0.1 unless told
otherwise.
"""

from __future__ import annotations

from typing import Annotated

import typer

from agent_fsm.cli.runs import StoreOption, WorldOption, load_world, open_url
from agent_fsm.store import open_store

__all__ = ["serve_command"]


def serve_command(
    store: StoreOption,
    world: WorldOption,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on (loopback unless you mean it).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8766,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Runs driven at once by this process.")] = 8,
    recover_after: Annotated[
        float, typer.Option("--recover-after", min=0.1, help="Take over runs a dead process left this many seconds.")
    ] = 60.0,
    cors: Annotated[
        list[str] | None, typer.Option("--cors", help="An origin browsers may call from (repeat; none: CORS off).")
    ] = None,
) -> None:
    """
    Serve the agent: start runs, list and read them, stream their events (SSE), decide their pauses.

    Exit status: 1 when no client is configured, the store cannot be opened or the world not loaded.
    """
    try:
        from agent_fsm.serve import Clients, ClientsMissing, is_loopback, serve, serve_app, settle_gc
    except ImportError as exc:
        typer.echo(f"error: serving needs the serve extra (pip install 'agent_fsm[serve]'): {exc}", err=True)
        raise typer.Exit(1) from None
    try:
        clients = Clients.from_environment()
    except ClientsMissing as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    open_url(store).close()  # fail now, not at the first request, on a wrong URL
    agent = load_world(world)
    if not is_loopback(host):
        typer.echo(f"warning: listening on {host}: put TLS in front (tokens travel in every request)", err=True)
    app = serve_app(
        agent,
        lambda: open_store(store, create=False),
        clients=clients,
        workers=workers,
        cors_origins=tuple(cors or ()),
        recover_after=recover_after,
    )
    names = ", ".join(sorted(c.name for c in clients.by_token.values()))
    typer.echo(f"serving on http://{host}:{port}/ (clients: {names})")
    settle_gc()  # start-up is done: what is alive now stays, and the runs in flight are what the collector walks
    serve(app, host=host, port=port)
