"""Shared test worlds and strategies: a ledger whose tools use the richer parts of JSON Schema."""

from __future__ import annotations

from typing import Any

import attrs

from agent_fsm import ToolError, ToolSpec

CREDIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer_id": {"type": "string", "pattern": "^C[0-9]{3}$"},
        "amount_cents": {"type": "integer", "minimum": 1, "maximum": 100000},
        "reason": {"type": "string", "enum": ["damaged", "late", "goodwill"]},
        "tier": {"type": "string", "enum": ["standard", "vip"]},
        "approval": {
            "type": "object",
            "properties": {
                "ticket": {"type": "string", "pattern": "^T-[0-9]{4}$"},
                "approver": {"type": "string", "minLength": 1, "maxLength": 20},
            },
            "required": ["ticket", "approver"],
            "additionalProperties": False,
        },
    },
    "required": ["customer_id", "amount_cents", "reason"],
    "additionalProperties": False,
}


@attrs.define
class Ledger:
    """A billing world: customers, invoices, and an effect log of credits and tags."""

    tools: dict[str, ToolSpec]
    effects: list[dict[str, Any]]


def make_ledger() -> Ledger:
    """A fresh ledger: two customers, three invoices, an empty effect log."""
    customers = {"ann@shop.io": "C001", "bob@shop.io": "C002"}
    effects: list[dict[str, Any]] = []

    def find_customer(email: str) -> dict[str, Any]:
        if email not in customers:
            raise KeyError(f"no customer with email {email}")
        return {"customer_id": customers[email]}

    def search_invoices(
        customer_id: str, status: str, limit: int = 5, include_lines: bool = False
    ) -> list[dict[str, Any]]:
        found = [{"invoice_id": f"INV-{n}", "status": status} for n in range(1, 4)][:limit]
        return [{**f, "lines": []} if include_lines else f for f in found]

    def issue_credit(
        customer_id: str, amount_cents: int, reason: str, tier: str = "standard", approval: dict[str, str] | None = None
    ) -> dict[str, Any]:
        if customer_id not in customers.values():
            raise ToolError(f"unknown customer {customer_id}")
        receipt = {"credit": customer_id, "amount_cents": amount_cents, "reason": reason, "tier": tier}
        effects.append(receipt)
        return receipt

    def tag_invoices(invoice_ids: list[str], tag: str) -> dict[str, Any]:
        receipt = {"tagged": sorted(set(invoice_ids)), "tag": tag}
        effects.append(receipt)
        return receipt

    def rate_reply(score: float, comment: str | None = None, **extra: Any) -> str:
        return "thanks"  # its schema allows extra properties, so the handler must take them

    tools = {
        "find_customer": ToolSpec(
            "Find a customer by email.",
            {
                "type": "object",
                "properties": {"email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.(io|com)$"}},
                "required": ["email"],
                "additionalProperties": False,
            },
            find_customer,
        ),
        "search_invoices": ToolSpec(
            "List a customer's invoices by status.",
            {
                "type": "object",
                "properties": {
                    "customer_id": {"type": "string", "minLength": 3, "maxLength": 12},
                    "status": {"type": "string", "enum": ["open", "paid", "void"]},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 20},
                    "include_lines": {"type": "boolean"},
                },
                "required": ["customer_id", "status"],
                "additionalProperties": False,
            },
            search_invoices,
        ),
        "issue_credit": ToolSpec(
            "Credit a customer's account. Moves money.", CREDIT_SCHEMA, issue_credit, effectful=True
        ),
        "tag_invoices": ToolSpec(
            "Tag invoices. Changes records.",
            {
                "type": "object",
                "properties": {
                    "invoice_ids": {
                        "type": "array",
                        "items": {"type": "string", "pattern": "^INV-[0-9]{1,4}$"},
                        "minItems": 1,
                        "maxItems": 5,
                    },
                    "tag": {"type": "string", "minLength": 1, "maxLength": 10},
                },
                "required": ["invoice_ids", "tag"],
                "additionalProperties": False,
            },
            tag_invoices,
            effectful=True,
        ),
        "rate_reply": ToolSpec(
            "Rate the reply.",
            {
                "type": "object",
                "properties": {"score": {"type": "number", "minimum": 0, "maximum": 5}, "comment": {"type": "string"}},
                "required": ["score"],
            },
            rate_reply,
        ),
    }
    return Ledger(tools=tools, effects=effects)
