"""A small warehouse world for the kernel's example tests: reads, one effect, and handlers that fail."""

from __future__ import annotations

from typing import Any

from agent_fsm import ToolError, ToolSpec


def make_warehouse() -> tuple[dict[str, ToolSpec], list[dict[str, Any]]]:
    """Tools and an effect log: ``ship`` is the only tool that changes the world."""
    stock = {"BOLT": 40, "NUT": 0}
    effects: list[dict[str, Any]] = []

    def count_stock(sku: str) -> int:
        return stock[sku]  # KeyError for an unknown sku: an expected failure

    def ship(sku: str, qty: int, address: dict[str, str]) -> dict[str, Any]:
        if stock[sku] < qty:
            raise ToolError(f"only {stock[sku]} {sku} in stock", data={"available": stock[sku]})
        stock[sku] -= qty
        receipt = {"sku": sku, "qty": qty, "city": address["city"]}
        effects.append(receipt)
        return receipt

    def slow_supplier() -> str:
        raise TimeoutError("supplier did not answer within 2s")

    def broken_report() -> float:
        return 1 / 0  # a bug, not a tool failure

    tools = {
        "count_stock": ToolSpec("How many of a SKU are on the shelf.", {"sku": str}, count_stock),
        "ship": ToolSpec(
            "Ship items to an address. Moves goods.",
            {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "enum": ["BOLT", "NUT"]},
                    "qty": {"type": "integer", "minimum": 1, "maximum": 10},
                    "address": {
                        "type": "object",
                        "properties": {"city": {"type": "string", "minLength": 1}},
                        "required": ["city"],
                        "additionalProperties": False,
                    },
                },
                "required": ["sku", "qty", "address"],
                "additionalProperties": False,
            },
            ship,
            effectful=True,
        ),
        "slow_supplier": ToolSpec("Ask the supplier for a delivery date.", {}, slow_supplier),
        "broken_report": ToolSpec("A report whose handler has a bug.", {}, broken_report),
    }
    return tools, effects


def ship_args(qty: int = 2, sku: str = "BOLT", city: str = "Ghent") -> dict[str, Any]:
    """Arguments of a valid shipment."""
    return {"sku": sku, "qty": qty, "address": {"city": city}}
