"""Small reference applications that run on the agent_fsm engine."""
