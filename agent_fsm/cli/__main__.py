"""``python -m agent_fsm.cli``: the same as the ``agent-fsm`` console script."""

from agent_fsm.cli import main

main()
