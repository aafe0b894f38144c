"""
``agent-fsm inbox --store URL --world MODULE:NAME``: the approval inbox in the browser, on 127.0.0.1.

Reviewers are named with their tokens in ``AGENT_FSM_REVIEWERS``
(``name:token`` pairs, tokens of 16 characters or more); without it the
inbox does not start. ``--world`` names the agent a decided run continues
with, as for ``agent-fsm runs approve``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from agent_fsm.cli.runs import StoreOption, WorldOption, load_world, open_url
from agent_fsm.store import open_store

__all__ = ["inbox_command"]


def inbox_command(
    store: StoreOption,
    world: WorldOption,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on (loopback unless you mean it).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8765,
) -> None:
    """
    Serve the approval inbox: paused runs, each run's page (live), approve / edit / reject forms.

    Exit status: 1 when no reviewer is configured, the store cannot be opened or the world not loaded.
    """
    try:
        from agent_fsm.web import Reviewers, ReviewersMissing, inbox_app, is_loopback, serve
    except ImportError as exc:
        typer.echo(f"error: the inbox needs the web extra (pip install 'agent_fsm[web]'): {exc}", err=True)
        raise typer.Exit(1) from None
    try:
        reviewers = Reviewers.from_environment()
    except ReviewersMissing as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    open_url(store).close()  # fail now, not at the first page, on a wrong URL
    agent = load_world(world)
    hosts = ("127.0.0.1", "localhost", "::1", host)
    if not is_loopback(host):
        typer.echo(
            f"warning: listening on {host}: anyone who can reach it may try to sign in; put TLS in front", err=True
        )
    app = inbox_app(lambda: open_store(store, create=False), agent, reviewers=reviewers, allowed_hosts=hosts)
    typer.echo(f"inbox on http://{host}:{port}/ (reviewers: {', '.join(sorted(reviewers.tokens))})")
    serve(app, host=host, port=port)
