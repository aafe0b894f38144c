"""
Seeded bugs behind conjunctions of three or four conditions (tests/worlds/meetings, freight, transfers).

A random search lands on every condition at once about never; the kit's
targeted phase drives each mined boundary with the other arguments combined
from what the gate can tell apart, so it finds each bug, and its coverage
report says which boundary values stayed unreached and why. The 20-seed
figures are measured by bench/conjunction_bugs.py; here the seed is fixed.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from types import ModuleType

import pytest
from hypothesis import settings

from agent_fsm import ToolCall, ToolSpec, Verdict, as_verdict
from agent_fsm.testing import InvariantViolation, check_gate_contains, default_settings
from tests.worlds import freight, meetings, transfers

WORLDS = {"meetings": meetings, "freight": freight, "transfers": transfers}
DEFAULTS = default_settings(derandomize=True, database=None)


def _found(failure: InvariantViolation) -> dict:
    found = re.search(r"the gate let (\w+)\((\{.*\})\) through", failure.detail)
    assert found, failure.detail
    return json.loads(found.group(2))


@pytest.mark.parametrize("name", list(WORLDS))
def test_the_targeted_phase_finds_the_conjunction(name: str) -> None:
    """At default settings targeting a boundary finds the bug: forbidden, allowed, and refused by the sound gate."""
    world: ModuleType = WORLDS[name]
    with pytest.raises(InvariantViolation) as caught:
        check_gate_contains(world.buggy_gate, world.make_world, world.forbidden, settings=DEFAULTS)
    assert caught.value.invariant == "forbidden_effect"
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "found by targeting the boundary" in notes
    arguments = _found(caught.value)
    tool = next(n for n in world.make_world().tools if n not in ("list_rooms", "list_zones", "lookup_account"))
    call = ToolCall("c", tool, arguments)
    assert world.forbidden(call) and as_verdict(world.buggy_gate(call)).kind == "allow"
    assert as_verdict(world.sound_gate(call)).kind != "allow"


def test_the_meetings_counterexample_holds_all_four_conditions() -> None:
    """A weekday, at most two hours, one room, exactly thirteen attendees."""
    with pytest.raises(InvariantViolation) as caught:
        check_gate_contains(meetings.buggy_gate, meetings.make_world, meetings.forbidden, settings=DEFAULTS)
    a = _found(caught.value)
    assert dt.date.fromisoformat(a["date"]).weekday() < 5
    assert (a["hours"] <= 2, a["rooms"], a["attendees"]) == (True, 1, 13)


@pytest.mark.parametrize("name", list(WORLDS))
def test_without_targeting_the_random_search_misses_it(name: str) -> None:
    """With the targeted phase off the check passes at the same seed: random search misses the conjunction."""
    world = WORLDS[name]
    coverage = check_gate_contains(
        world.buggy_gate, world.make_world, world.forbidden, settings=DEFAULTS, targeted=False
    )
    assert coverage.runs > 0


@pytest.mark.parametrize("name", list(WORLDS))
def test_sound_gates_pass_and_every_boundary_is_reached(name: str) -> None:
    """The sound gates pass; after targeting, no mined boundary of a single argument is left unreached."""
    world = WORLDS[name]
    coverage = check_gate_contains(
        world.sound_gate, world.make_world, world.forbidden, settings=settings(DEFAULTS, max_examples=20)
    )
    assert {k: v for k, v in coverage.missing_boundaries.items() if not k.startswith("sum(")} == {}


def test_a_boundary_left_unreached_is_reported_with_the_reason() -> None:
    """A boundary value no accepted call can take stays unreached, and the report says why."""
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 100_000},
            "note": {"type": ["string", "null"]},
        },
        "required": ["n", "note"],
    }

    def tools():
        return {"put": ToolSpec("Put n.", schema, lambda n, note: n, effectful=True)}

    def gate(call: ToolCall) -> Verdict:
        return Verdict.deny("too many") if (call.arguments or {}).get("n", 0) > 12 else Verdict.allow("ok")

    coverage = check_gate_contains(gate, tools, lambda call: False, settings=settings(DEFAULTS, max_examples=1))
    missing = coverage.missing_boundaries["put.n"]
    assert missing and set(coverage.unreachable["put.n"]) == set(missing)
    report = coverage.report()
    assert f"put.n: never {', '.join(map(str, missing))}" in report
    assert f"      {missing[0]}: another required argument has no values the kit can list" in report


def test_targeted_arguments_offer_every_weekday_and_single_items() -> None:
    """A date-time argument is offered a whole week, a list of rooms each room alone, with the boundary held."""
    from agent_fsm.testing._targeting import targeted_arguments

    schema = {
        "type": "object",
        "properties": {
            "start": {"type": "string", "format": "date-time"},
            "rooms": {"type": "array", "items": {"type": "string", "enum": ["atlas", "borealis"]}, "maxItems": 3},
            "attendees": {"type": "integer", "minimum": 1, "maximum": 50},
        },
        "required": ["start", "rooms", "attendees"],
    }
    tool = ToolSpec("Book.", schema, lambda start, rooms, attendees: attendees)
    offered = list(targeted_arguments(tool, "attendees", 13, (13, 12, 14)))
    assert {a["attendees"] for a in offered} == {13}
    weekdays = {dt.datetime.fromisoformat(a["start"].replace("Z", "+00:00")).weekday() for a in offered}
    assert weekdays == set(range(7))
    assert {"atlas"} in [set(a["rooms"]) for a in offered if len(a["rooms"]) == 1]
    assert {"borealis"} in [set(a["rooms"]) for a in offered if len(a["rooms"]) == 1]
    assert all(not tool.errors(a) for a in offered)
