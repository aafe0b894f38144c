"""
``agent-fsm mcp list -- COMMAND ARGS...`` (or ``--url URL``): an MCP server's tools, as the engine will treat them.

Each tool is printed with what its annotations make of it here: an effect
(the gate decides) or effect-free (it runs), idempotent (retried under one
key) or not (one attempt, then a person), and destructive when it says so.
A tool the engine refuses (a hostile schema, a name providers reject) is
listed with the reason. The server's ``--env`` and ``--header`` values are
secrets: never printed, redacted from what the server sends back.
"""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["mcp_app"]

mcp_app = typer.Typer(name="mcp", help="MCP servers: the tools they offer and how the engine treats each.")


def _pairs(values: list[str] | None, separator: str, what: str) -> dict[str, str]:
    # A value given without its name is most likely the secret itself: the error names the option, never it.
    pairs = {}
    for number, value in enumerate(values or [], start=1):
        name, found, rest = value.partition(separator)
        if not found or not name.strip():
            raise typer.BadParameter(
                f"{what} must be NAME{separator}VALUE; {what} #{number} has no name (value not shown)"
            )
        pairs[name.strip()] = rest.strip() if what == "--header" else rest
    return pairs


def _shown(text: str, *, spaces: bool = False) -> str:
    # A server's text reaches a terminal only printable: control characters (escape sequences) are quoted.
    return text if text.isprintable() and (spaces or " " not in text) else ascii(text)


@mcp_app.command(name="list")
def list_command(
    command: Annotated[list[str] | None, typer.Argument(help="The server's command and arguments, after --.")] = None,
    url: Annotated[str | None, typer.Option("--url", help="A Streamable HTTP server's URL instead.")] = None,
    header: Annotated[list[str] | None, typer.Option("--header", help="NAME:VALUE sent with every request.")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="NAME=VALUE for the server's environment.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the server.")] = 60.0,
) -> None:
    """
    List a server's tools: effect or effect-free, idempotent or not, destructive, refused.

    Exit status: 1 when the server cannot be started or reached, 2 for a usage error.
    """
    from agent_fsm.mcp import MCPServer, RemoteTool, ServerUnavailable, ToolsRefused

    if (url is None) == (not command):
        raise typer.BadParameter("give either a command (after --) or --url, not both")
    if url is not None:
        server = MCPServer.http(url, headers=_pairs(header, ":", "--header"), timeout=timeout)
    else:
        assert command
        server = MCPServer.stdio(command[0], command[1:], env=_pairs(env, "=", "--env"), timeout=timeout)
    try:
        with server:
            listed = [RemoteTool.of(tool, server) for tool in server.list_tools()]
            try:
                server.tools()
                refused: dict[str, str] = {}
            except ToolsRefused as exc:
                refused = exc.problems
    except ServerUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    width = max((len(_shown(t.name)) for t in listed), default=4)
    for tool in listed:
        name = _shown(tool.name)
        if tool.name in refused:
            typer.echo(f"{name:<{width}}  refused: {_shown(refused[tool.name], spaces=True)}")
            continue
        effect = "effect" if tool.effectful else "effect-free"
        idempotent = "idempotent" if tool.idempotent else "not idempotent"
        destructive = "  destructive" if tool.destructive else ""
        summary = tool.description.strip().splitlines()[0][:80] if tool.description.strip() else ""
        typer.echo(f"{name:<{width}}  {effect:<11}  {idempotent:<14}{destructive:<13}  {_shown(summary, spaces=True)}")
    typer.echo(f"{len(listed)} tool(s); {len(refused)} refused by the engine's rules", err=True)
