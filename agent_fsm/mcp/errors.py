"""
What :mod:`agent_fsm.mcp` raises when a server cannot be used, before any run::

    * MCPError (an AgentFSMError)
      + ServerUnavailable (also OSError)            -- the server could not be started or reached, or it went away
      + ToolsRefused (also ToolDefinitionError)     -- the server's tool list holds tools the engine will not offer

At call time nothing is raised out of a run: a failed call is an ``error``
observation, and an effectful call whose outcome is unknown raises
:class:`agent_fsm.OutcomeUnknown` inside the handler, for the engine to handle.
"""

from __future__ import annotations

from agent_fsm.engine import AgentFSMError, ToolDefinitionError

__all__ = ["MCPError", "ServerUnavailable", "ToolsRefused"]


class MCPError(AgentFSMError):
    """
    An MCP server could not be used as asked.

    .. versionadded:: 0.2
    """


class ServerUnavailable(MCPError, OSError):
    """
    The server could not be started or reached, or the connection to it is gone.

    The message never holds a value from the server's ``env`` or ``headers``.

    .. versionadded:: 0.2
    """


class NotSent(Exception):
    """Inside the adapter: the call did not reach a tool, so nothing happened on the server (never raised out)."""


class Lost(Exception):
    """Inside the adapter: the call left and no answer came back, so its effect may or may not have happened."""


class ToolsRefused(MCPError, ToolDefinitionError):
    """
    Tools on the server's list break a rule the engine holds every tool to (a name, a schema, a clash).

    ``problems`` names every refused tool with its reason, all at once; pass
    ``allow=`` to leave those tools out and use the others.

    .. versionadded:: 0.2
    """

    def __init__(self, message: str, problems: dict[str, str]) -> None:
        super().__init__(message)
        self.problems = problems
