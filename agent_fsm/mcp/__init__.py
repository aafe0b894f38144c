"""
Tools from MCP (Model Context Protocol) servers, behind the engine's gate.

    from agent_fsm import Agent, ask_for_effects
    from agent_fsm.mcp import MCPServer

    with MCPServer.stdio("mcp-server-git", ["--repository", "."]) as git:
        agent = Agent(model, git.tools(), gate=ask_for_effects)
        result = agent.run("commit the staged changes")   # the commit waits for a person

A server's tool list becomes a registry of :class:`agent_fsm.ToolSpec`: each
input schema is the tool's contract (checked by the engine's schema rules),
a tool is effectful unless it says it is read-only, and idempotent when it
says so. Every call crosses the engine's boundary like a local tool's; its
answer becomes an observation, secrets given to the server are redacted from
everything it sends back, and a call whose outcome is unknown raises
:class:`agent_fsm.OutcomeUnknown` for the engine to settle. A server opened
with ``elicitation=True`` may ask a person during a call: the run pauses on
the open call, and the person's decision goes back to it. See docs/mcp.md.

The MCP SDK (``pip install 'agent_fsm[mcp]'``) is imported when a server is
first opened, not by importing this package.

.. versionadded:: 0.2
"""

from agent_fsm.mcp.connection import DEFAULT_TIMEOUT, MCPServer
from agent_fsm.mcp.errors import MCPError, ServerUnavailable, ToolsRefused
from agent_fsm.mcp.results import DEFAULT_MAX_RESULT_CHARS
from agent_fsm.mcp.secrets import REDACTED
from agent_fsm.mcp.toolset import IDEMPOTENCY_KEY, Combined, MCPProgress, MCPTools, RemoteTool, combine, treatment

__all__ = [
    # Servers and their tools
    "MCPServer",
    "MCPTools",
    "Combined",
    "RemoteTool",
    "combine",
    "treatment",
    # Events
    "MCPProgress",
    # Constants
    "DEFAULT_MAX_RESULT_CHARS",
    "DEFAULT_TIMEOUT",
    "IDEMPOTENCY_KEY",
    "REDACTED",
    # Errors
    "MCPError",
    "ServerUnavailable",
    "ToolsRefused",
]
