"""constants_of reads a gate's thresholds wherever its code reaches them, and contract_cases enumerates the rest."""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from typing import Any

import attrs

from agent_fsm import ToolCall, ToolSpec, Verdict
from agent_fsm.testing import constants_of, contract_cases, gate_constants
from tests.worlds import claims, expenses, venues

CAPACITY = {"atlas": 8, "borealis": 14}
QUIET_HOURS = frozenset({22, 23})


class Tier(enum.Enum):
    SILVER = 250
    GOLD = 900


class Policy:
    CEILING = 4_321


def test_closure_of_a_lambda_a_factory_wraps() -> None:
    """A threshold baked into a lambda that a gate factory closes over (inside a tuple of rules) is found."""
    assert {11, 12, 13} <= set(constants_of(venues.sound_gate))
    assert {13, 12, 14} <= set(constants_of(venues.buggy_gate))
    assert 12 in constants_of(venues.forbidden)  # through a module global holding the lambda


def test_module_dict_keys_and_values() -> None:
    """``LIMITS[currency] + 1``: the dict's keys and each value with its neighbours."""
    found = constants_of(expenses.buggy_gate)
    assert {"EUR", "USD", "GBP"} <= set(found)
    assert {39_999, 40_000, 40_001, 45_001, 35_001} <= set(found)


def test_helper_functions_the_gate_calls() -> None:
    """A gate that delegates to a helper (``_total``) reaches the constant the helper's caller compares with."""
    assert 75_001 in constants_of(claims.buggy_gate)


def test_defaults_partials_methods_and_objects() -> None:
    """Default arguments, functools.partial arguments, bound methods and a callable object's fields."""

    def gate(call: ToolCall, limit: int = 77, *, floor: int = 5) -> bool:
        return True

    def judge(call: ToolCall, limit: int) -> bool:
        return True

    @attrs.frozen
    class Threshold:
        limit: int
        rooms: tuple[str, ...]

        def __call__(self, call: ToolCall) -> bool:
            return True

        def check(self, call: ToolCall) -> bool:
            return True

    assert {76, 77, 78, 4, 5, 6} <= set(constants_of(gate))
    assert {600, 601} <= set(constants_of(functools.partial(judge, limit=601)))
    threshold = Threshold(31, ("aurora",))
    assert {30, 31, 32, "aurora"} <= set(constants_of(threshold))
    assert 31 in constants_of(threshold.check)


def test_enums_sets_and_class_attributes() -> None:
    """Enum values (from a member or the class), frozensets, and a user class's attribute by name."""

    def gate(call: ToolCall) -> bool:
        return Tier.GOLD is None or 0 in QUIET_HOURS or Policy.CEILING > 0

    found = set(constants_of(gate))
    assert {249, 250, 251, 899, 900, 901} <= found
    assert {21, 22, 23, 24} <= found
    assert {4_320, 4_321, 4_322} <= found


def test_foreign_code_is_not_read() -> None:
    """The engine's Verdict and the standard library bring none of their own numbers in."""

    def gate(call: ToolCall) -> Verdict:
        return Verdict.allow(str(functools.reduce(lambda a, b: a, [3])))

    assert set(constants_of(gate)) <= {3, 2, 4}


def test_a_cycle_and_a_large_table_stay_bounded() -> None:
    """Mutual references end the walk; a huge table contributes a bounded number of constants."""
    table: dict[str, Any] = {f"k{i}": i * 1000 for i in range(5000)}
    table["self"] = table

    def gate(call: ToolCall) -> bool:
        return table is not None

    found = constants_of(gate)
    assert 0 < len(found) <= 512


def test_gate_constants_leave_argument_names_out() -> None:
    """``call.arguments["currency"]`` reads a key: argument names are not offered as values."""
    tools = expenses.make_world().tools
    found = gate_constants(tools, expenses.buggy_gate)
    assert "currency" not in found and "amount_cents" not in found and "EUR" in found


def _bad(cases: list[dict[str, Any]], name: str, world: Any) -> list[dict[str, Any]]:
    allowed: Callable[[ToolCall], bool] = lambda call: world.buggy_gate(call).kind == "allow"
    return [a for a in cases if world.forbidden(ToolCall("c", name, a)) and allowed(ToolCall("c", name, a))]


def test_contract_cases_hold_each_seeded_counterexample() -> None:
    """Enumerating enums x booleans x boundaries x line-item sums puts every seeded bug among the cases."""
    for world, name in ((venues, "book_event"), (expenses, "file_expense"), (claims, "submit_claim")):
        tools = world.make_world().tools
        cases = contract_cases(tools[name], gate_constants(tools, world.buggy_gate, world.forbidden))
        assert cases and all(not tools[name].errors(case) for case in cases)
        assert _bad(cases, name, world), world.__name__


def test_contract_cases_sum_line_items_to_each_constant() -> None:
    """A list of line items whose parts add up to 75,001 is among the claim cases (no single line can)."""
    tool = claims.make_world().tools["submit_claim"]
    totals = {sum(line["cents"] for line in case["lines"]) for case in contract_cases(tool, (75_001,))}
    assert 75_001 in totals


def test_contract_cases_give_up_past_the_limit() -> None:
    """A contract with more combinations than the limit is left to random search (no cases)."""
    schema = {
        "type": "object",
        "properties": {f"f{i}": {"type": "integer", "minimum": 0, "maximum": 9} for i in range(5)},
        "required": [f"f{i}" for i in range(5)],
    }
    tool = ToolSpec("t", schema, lambda **_: None)
    assert contract_cases(tool, limit=10_000) == []
    assert len(contract_cases(tool, limit=100_000)) == 100_000
