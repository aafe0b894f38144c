"""
bench/py does the same work in every implementation: checked here once per scenario, never timed.

The peer frameworks come with the ``bench`` extra; without it their cases
skip (``pip install -e '.[bench]'``) and the rest still run.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _import_peerbench() -> None:
    # bench/ is a folder of scripts; their shared parts are the peerbench package beside them. The folder is on
    # the import path only while it loads, so that its scripts' names shadow nothing for the rest of the suite.
    sys.path.insert(0, str(BENCH))
    try:
        import peerbench.async_runs
        import peerbench.verification  # noqa: F401
    finally:
        sys.path.remove(str(BENCH))


_import_peerbench()

from peerbench.async_runs import ENTRIES, many_at_once, verify_entries  # noqa: E402
from peerbench.contestants import CONTESTANTS, run_once  # noqa: E402
from peerbench.scenarios import PAUSED, Mismatch, new_job, scenarios, verify  # noqa: E402
from peerbench.verification import reference, verify_paused  # noqa: E402

SCENARIOS = [*scenarios(12), PAUSED]


def _cases() -> list[Any]:
    cases = []
    for contestant in CONTESTANTS:
        marks = []
        if not contestant.available:
            reason = f"{contestant.package} is not installed: pip install -e '.[bench]'"
            marks.append(pytest.mark.skip(reason=reason))
        forms = [("sync", False)] if contestant.sync is not None else []
        forms += [("async", True)] if contestant.asynchronous is not None else []
        for form, use_async in forms:
            for scenario in SCENARIOS:
                if scenario is PAUSED and contestant.name != "bare loop":
                    continue  # pausing is compared for the bare loop, as the memory figure is
                name = f"{contestant.name}-{form}-{scenario.key}"
                cases.append(pytest.param(contestant, scenario, use_async, id=name, marks=marks))
    return cases


@pytest.mark.parametrize(("contestant", "scenario", "use_async"), _cases())
def test_implementation_matches_agent_fsm(contestant: Any, scenario: Any, use_async: bool) -> None:
    """One run ends, acts and records (transcript, observations, prompt sizes) exactly as agent_fsm's."""
    if scenario is PAUSED:
        verify_paused()
        return
    outcome = run_once(contestant, new_job(scenario), use_async=use_async)
    verify(reference(scenario), outcome, contestant.name, scenario.title)


def test_reference_runs_end_as_scripted() -> None:
    """agent_fsm's own runs end as each scenario says: answered with one 4999 refund, or step_limit with none."""
    overreach, wanderer, parallel = (reference(s) for s in scenarios(12))
    refund = [{"order_id": "A-17", "refunded_cents": 4999}]
    assert (overreach.stop, overreach.effects) == ("answered", refund)
    assert (wanderer.stop, wanderer.effects, len(wanderer.prompt_log)) == ("step_limit", [], 12)
    assert (parallel.stop, parallel.effects) == ("answered", refund)
    assert [o[2] for o in parallel.observations] == ["result", "denied", "result", "result"]
    assert wanderer.prompt_log == sorted(set(wanderer.prompt_log)), "the prompt grows every turn"


@pytest.mark.parametrize("field", ["stop", "effects", "messages", "observations", "prompt_log"])
def test_verification_fails_loudly(field: str) -> None:
    """A contestant that differs in any compared field is refused, and the message names the field."""
    want = reference(scenarios(12)[0])
    wrong = {
        "stop": "step_limit",
        "effects": [],
        "messages": want.messages[:-1],
        "observations": want.observations[1:],
        "prompt_log": [n + 1 for n in want.prompt_log],
    }[field]
    with pytest.raises(Mismatch, match=field):
        verify(want, dataclasses.replace(want, **{field: wrong}), "tampered", "over-reach")


@pytest.mark.parametrize(
    "entry",
    [pytest.param(e, id=e.key, marks=[] if e.available() else [pytest.mark.skip(reason=e.missing)]) for e in ENTRIES],
)
def test_concurrent_entry_matches_agent_fsm(entry: Any) -> None:
    """bench/concurrent_runs.py: each way of running on asyncio does agent_fsm's work, alone and 20 at once."""
    verify_entries([entry])
    wall, cpu = many_at_once(entry, 20)
    assert wall > 0 and cpu > 0


def test_bench_modules_stay_small() -> None:
    """The benchmark follows the project's rule too: one concept per module, none past 400 lines."""
    long = {
        str(path.relative_to(BENCH)): n
        for path in BENCH.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert not long, f"bench modules over 400 lines: {long}"
