"""A world for ``agent-fsm runs`` whose tool asks mid-call: server-everything's form, opened with elicitation."""

from __future__ import annotations

from agent_fsm import Agent, ScriptedModel, allow_all, answer_message, tool_call_message
from agent_fsm.mcp import MCPServer
from tests.test_mcp import _node_server


def world() -> Agent:
    """The form agent, its server started for this process (and stopped when the process ends)."""
    node, index = _node_server()
    server = MCPServer.stdio(node, [str(index), "stdio"], timeout=60, elicitation=True).open()
    script = [tool_call_message("c1", "trigger-elicitation-request", {}), answer_message("Thanks.")]
    tools = server.tools(allow=["trigger-elicitation-request"])
    return Agent(ScriptedModel(script), tools, gate=allow_all, name="form")
