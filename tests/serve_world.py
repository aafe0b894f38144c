"""
The world ``agent-fsm serve`` is tested with: the ledger's payments (``BIG-*`` invoices need a person).

The ledger file is named by ``AGENT_FSM_LEDGER``, so a served process and the
test read the same effects.
"""

from __future__ import annotations

import os
from pathlib import Path

from agent_fsm import Agent
from tests.ledger_world import ledger_agent

__all__ = ["agent"]


def agent() -> Agent:
    """The ledger's agent writing to the file ``AGENT_FSM_LEDGER`` names."""
    return ledger_agent(Path(os.environ["AGENT_FSM_LEDGER"]))
