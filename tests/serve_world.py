"""
The world ``agent-fsm serve`` is tested with: the ledger's payments (``BIG-*`` invoices need a person).

The ledger file is named by ``AGENT_FSM_LEDGER``, so served processes and the
test read the same effects.
"""

from __future__ import annotations

import os
from pathlib import Path

from agent_fsm import Agent
from tests.ledger_world import ledger_agent

__all__ = ["agent"]


def agent() -> Agent:
    """
    The ledger's agent writing to the file ``AGENT_FSM_LEDGER`` names.

    ``AGENT_FSM_DIE`` (``after:send_receipt``, ...) kills the serving process inside that handler, once.
    """
    return ledger_agent(Path(os.environ["AGENT_FSM_LEDGER"]), die=os.environ.get("AGENT_FSM_DIE"), token="serve")
