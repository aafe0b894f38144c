"""An MCP server with one read-only ``echo`` tool, over stdio: what bench/bench_mcp.py calls (the SDK's server API)."""

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server: MCPServer = MCPServer("echo")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def echo(text: str) -> str:
    """Say the text back."""
    return text


if __name__ == "__main__":
    server.run("stdio")
