"""
The world ``agent-fsm serve`` is tested with: the ledger's payments (``BIG-*`` invoices need a person).

The ledger file is named by ``AGENT_FSM_LEDGER``, so served processes and the
test read the same effects.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agent_fsm import Agent
from tests.ledger_world import LedgerModel, ledger_tools, pay_gate

__all__ = ["agent"]


class _SlowLedgerModel(LedgerModel):
    """The ledger's model taking ``seconds`` a reply: a run long enough for a client to change servers in it."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        time.sleep(self.seconds)
        return super().chat(messages, tools)


def agent() -> Agent:
    """
    The ledger's agent writing to the file ``AGENT_FSM_LEDGER`` names.

    ``AGENT_FSM_DIE`` (``after:send_receipt``, ...) kills the serving process inside that handler, once;
    ``AGENT_FSM_SLOW`` (seconds) makes each model reply take that long.
    """
    slow = float(os.environ.get("AGENT_FSM_SLOW", "0"))
    model = _SlowLedgerModel(slow) if slow else LedgerModel()
    tools = ledger_tools(Path(os.environ["AGENT_FSM_LEDGER"]), die=os.environ.get("AGENT_FSM_DIE"), token="serve")
    return Agent(model, tools, gate=pay_gate)
