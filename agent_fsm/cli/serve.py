"""
``agent-fsm serve --world MODULE:NAME --store URL``: the agent's runs started, streamed and decided over HTTP.

With ``--temporal ADDRESS`` instead of ``--store`` the runs are Temporal
workflows, driven by the workers of ``--task-queue`` (which serve the agent
by its name); this process starts, reads, streams and decides them.

Clients are named with their tokens and scopes in ``AGENT_FSM_CLIENTS``
(``name:token:start+read+decide``, tokens of 16 characters or more);
without it the server does not start. It listens on 127.0.0.1 unless told
otherwise.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from agent_fsm.cli.runs import WorldOption, load_world, open_url
from agent_fsm.store import open_store

__all__ = ["serve_command"]


def serve_command(
    world: WorldOption,
    store: Annotated[
        str | None, typer.Option("--store", help="sqlite:///PATH or postgresql://USER@HOST:PORT/DB")
    ] = None,
    temporal: Annotated[
        str | None, typer.Option("--temporal", help="HOST:PORT of a Temporal server: runs are workflows there.")
    ] = None,
    task_queue: Annotated[
        str | None, typer.Option("--task-queue", help="The Temporal task queue the agent's workers poll.")
    ] = None,
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

    Exit status: 1 when no client is configured, the store cannot be opened or the world not loaded,
    or not exactly one of --store and --temporal is given.
    """
    if (store is None) == (temporal is None):
        typer.echo("error: give --store URL, or --temporal ADDRESS for runs as Temporal workflows", err=True)
        raise typer.Exit(1)
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
    if store is not None:
        open_url(store).close()  # fail now, not at the first request, on a wrong URL
    agent = load_world(world)
    if not is_loopback(host):
        typer.echo(f"warning: listening on {host}: put TLS in front (tokens travel in every request)", err=True)
    if temporal is not None:
        app = _on_temporal(agent, temporal, task_queue, clients, tuple(cors or ()))
    else:
        assert store is not None
        url = store
        app = serve_app(
            agent,
            lambda: open_store(url, create=False),
            clients=clients,
            workers=workers,
            cors_origins=tuple(cors or ()),
            recover_after=recover_after,
        )
    names = ", ".join(sorted(c.name for c in clients.by_token.values()))
    typer.echo(f"serving on http://{host}:{port}/ (clients: {names})")
    settle_gc()  # start-up is done: what is alive now stays, and the runs in flight are what the collector walks
    serve(app, host=host, port=port)


def _on_temporal(agent: Any, address: str, task_queue: str | None, clients: Any, cors: tuple[str, ...]) -> Any:
    try:
        import temporalio.client  # noqa: F401  (connected at start-up: a missing extra is told now)

        from agent_fsm.serve.temporal import temporal_app

        return temporal_app(agent, address, clients=clients, task_queue=task_queue, cors_origins=cors)
    except ImportError as exc:
        typer.echo(f"error: --temporal needs the temporal extra (pip install 'agent_fsm[temporal]'): {exc}", err=True)
        raise typer.Exit(1) from None
    except TypeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
