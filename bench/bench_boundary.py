"""
What the effect boundary costs per call: validating arguments, storing a result, rendering declarations.

Not a test: it prints microseconds. Each figure sets the way agent_fsm does
it now against the way it did before (a ``jsonschema`` validator walked on
every call, a JSON round trip for every result, declarations rendered on
every run) and, when the package is installed, ``jsonschema-rs``, the
compiled validator considered and not chosen (docs/hostile-input.md says why).

    python bench/bench_boundary.py [--number 20000]
"""

from __future__ import annotations

import argparse
import json
import timeit
from collections.abc import Callable
from typing import Any

from jsonschema.validators import Draft202012Validator

from agent_fsm import ToolCall, estimate_tokens, function_declarations, validate_call
from agent_fsm.engine._json import storable
from agent_fsm.engine._tools import declaration_tokens
from agent_fsm.examples.support_desk import make_support_desk
from tests.strategies import CREDIT_SCHEMA

REFUND = {"order_id": "A-17", "amount_cents": 4999}
CREDIT = {
    "customer_id": "C001",
    "amount_cents": 500,
    "reason": "late",
    "approval": {"ticket": "T-0001", "approver": "x"},
}
RESULT = {"order_id": "A-17", "status": "delivered", "paid_cents": 4999, "items": [{"sku": "MUG", "qty": 1}]}


def _us(fn: Callable[[], Any], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=20000, help="calls per timing (best of 5 reported)")
    number = parser.parse_args().number
    desk = make_support_desk()
    tools = desk.tools
    refund = tools["refund_order"]
    credit_spec = type(refund)("Credit.", CREDIT_SCHEMA, lambda **kwargs: None)
    rows: list[tuple[str, float]] = []

    refund_call = ToolCall("c", "refund_order", REFUND, json.dumps(REFUND))
    plain = Draft202012Validator(refund.json_schema)
    rows.append(("refund_order: jsonschema walk (before)", _us(lambda: list(plain.iter_errors(REFUND)), number)))
    rows.append(("refund_order: compiled check", _us(lambda: refund.errors(REFUND), number)))
    rows.append(
        ("refund_order: validate_call (with depth/NaN/size)", _us(lambda: validate_call(refund_call, tools), number))
    )
    rich = Draft202012Validator(CREDIT_SCHEMA)
    rows.append(("issue_credit: jsonschema walk (before)", _us(lambda: list(rich.iter_errors(CREDIT)), number)))
    rows.append(("issue_credit: compiled check", _us(lambda: credit_spec.errors(CREDIT), number)))
    try:
        import jsonschema_rs  # type: ignore[import-not-found]
    except ImportError:
        pass
    else:
        rs_refund = jsonschema_rs.Draft202012Validator(refund.json_schema)
        rs_credit = jsonschema_rs.Draft202012Validator(CREDIT_SCHEMA, validate_formats=True)
        rows.append(("refund_order: jsonschema-rs is_valid", _us(lambda: rs_refund.is_valid(REFUND), number)))
        rows.append(("issue_credit: jsonschema-rs is_valid", _us(lambda: rs_credit.is_valid(CREDIT), number)))
    rows.append(("result: json round trip (before)", _us(lambda: json.loads(json.dumps(RESULT, default=str)), number)))
    rows.append(("result: storable copy", _us(lambda: storable(RESULT), number)))
    render = lambda: [spec.declaration(name) for name, spec in tools.items()]
    rows.append(
        ("declarations + tokens per run (before)", _us(lambda: sum(estimate_tokens(d) for d in render()), number // 10))
    )
    rows.append(
        (
            "declarations + tokens per run (cached)",
            _us(lambda: (function_declarations(tools), declaration_tokens(tools, estimate_tokens)), number // 10),
        )
    )
    width = max(len(name) for name, _ in rows)
    for name, micros in rows:
        print(f"{name:{width}}  {micros:8.2f} µs")


if __name__ == "__main__":
    main()
