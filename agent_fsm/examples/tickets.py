"""
The ticket desk's backend: four tickets, the effect log, and the tools over them.

Closing, deleting and creating are effectful (each appends a receipt to the
effect log); only closing and deleting are destructive, which is what
:func:`desk_gate` asks a human about.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent_fsm.engine import Gate, ToolCall, ToolError, ToolSpec, Verdict, as_verdict, ask_for_effects

__all__ = ["TicketDesk", "desk_gate"]

_TICKETS = (
    ("TKT-1", "Cannot log in after resetting my password"),
    ("TKT-2", "Invoice PDF downloads blank"),
    ("TKT-3", "Login page returns a 500 error"),
    ("TKT-4", "Billing address cannot be changed"),
)
_ID = {"type": "string", "pattern": "^TKT-[0-9]{1,6}$"}


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


class TicketDesk:
    """The tickets, the effect log (one receipt per close or delete) and a count of backend reads."""

    def __init__(self) -> None:
        self.tickets = {tid: {"id": tid, "subject": subject, "status": "open"} for tid, subject in _TICKETS}
        self.effects: list[dict[str, Any]] = []
        self.backend_reads = 0

    def search_tickets(self, query: str) -> list[dict[str, str]]:
        """Open tickets whose subject contains every word of ``query``."""
        self.backend_reads += 1
        wanted = set(re.findall(r"[a-z0-9]+", query.casefold()))
        return [
            dict(t)
            for t in self.tickets.values()
            if t["status"] == "open" and wanted <= set(re.findall(r"[a-z0-9]+", t["subject"].casefold()))
        ]

    def get_ticket(self, ticket_id: str) -> dict[str, str]:
        """One ticket, open or closed."""
        self.backend_reads += 1
        return dict(self._ticket(ticket_id))

    def close_ticket(self, ticket_id: str) -> dict[str, str]:
        """Close an open ticket; the receipt goes to the effect log."""
        ticket = self._ticket(ticket_id)
        if ticket["status"] != "open":
            raise ToolError(f"{ticket_id} is already {ticket['status']}")
        ticket["status"] = "closed"
        receipt = dict(ticket)
        self.effects.append(receipt)
        return receipt

    def create_ticket(self, subject: str) -> dict[str, Any]:
        """Open a new ticket; the receipt goes to the effect log."""
        ticket_id = f"TKT-{max(int(t.split('-')[1]) for t in self.tickets) + 1 if self.tickets else 1}"
        ticket = {"id": ticket_id, "subject": subject, "status": "open"}
        self.tickets[ticket_id] = ticket
        receipt: dict[str, Any] = {**ticket, "created": True}
        self.effects.append(receipt)
        return dict(receipt)

    def delete_ticket(self, ticket_id: str) -> dict[str, Any]:
        """Delete a ticket for good; the receipt goes to the effect log."""
        ticket = self._ticket(ticket_id)
        del self.tickets[ticket_id]
        receipt = {"id": ticket_id, "deleted": True, "subject": ticket["subject"]}
        self.effects.append(receipt)
        return receipt

    def _ticket(self, ticket_id: str) -> dict[str, str]:
        if ticket_id not in self.tickets:
            raise ToolError(f"no ticket {ticket_id}")
        return self.tickets[ticket_id]

    def tools(self) -> dict[str, ToolSpec]:
        """The desk's tool registry; close and delete are effectful."""
        return {
            "search_tickets": ToolSpec(
                "Open tickets whose subject has every word of the query.",
                _object(query={"type": "string", "minLength": 1, "maxLength": 100}),
                self.search_tickets,
            ),
            "get_ticket": ToolSpec("Show one ticket.", _object(ticket_id=_ID), self.get_ticket),
            "close_ticket": ToolSpec("Close a ticket.", _object(ticket_id=_ID), self.close_ticket, effectful=True),
            "create_ticket": ToolSpec(
                "Open a new ticket with this subject.",
                _object(subject={"type": "string", "minLength": 3, "maxLength": 120}),
                self.create_ticket,
                effectful=True,
            ),
            "delete_ticket": ToolSpec(
                "Delete a ticket permanently.", _object(ticket_id=_ID), self.delete_ticket, effectful=True
            ),
        }


def desk_gate(tools: Mapping[str, ToolSpec]) -> Gate:
    """Reads and creating a ticket run; closing and deleting (destructive) wait for a human."""
    ask = ask_for_effects(tools, "is destructive and needs a human's approval")

    def gate(call: ToolCall) -> Verdict:
        if call.name == "create_ticket":
            return Verdict.allow("creating a ticket destroys nothing")
        return as_verdict(ask(call))

    return gate
