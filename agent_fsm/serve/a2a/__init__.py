"""A2A 1.0 over the one event stream: an agent card and JSON-RPC tasks whose pauses ask for input."""

from agent_fsm.serve.a2a.events import Tasks, state_of
from agent_fsm.serve.a2a.routes import a2a_routes

__all__ = ["Tasks", "a2a_routes", "state_of"]
