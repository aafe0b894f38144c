"""The eval's shared budget, as a property: money and turns summed over every run and judge call never pass it."""

from __future__ import annotations

import json
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from agent_fsm.engine import Limits, Price, Prices, ScriptedModel, answer_message, tool_call_message
from agent_fsm.evals import Case, Dataset, EvalBudget, Judge, run_eval
from agent_fsm.examples.support_desk import environment
from agent_fsm.scenarios import ModelSpec

PRICES = Prices(default=Price(input=Decimal("2.50"), output=Decimal("10.00")))
LOOKUP = tool_call_message("c1", "lookup_order", {"order_id": "A-17"})
DONE = answer_message("A-17 is damaged; 4999 cents were paid.")  # every script ends with its final answer

VERDICT = answer_message(json.dumps({"passed": True, "score": 1.0, "reason": "fine"}))

cents = st.integers(min_value=0, max_value=300).map(lambda n: Decimal(n) / 10_000)


@st.composite
def cases(draw, index: int) -> Case:
    """A case that keeps calling tools (the wanderer) or answers after a few lookups, under its own limits."""
    own_cost = draw(st.none() | cents)
    limits = Limits(
        max_turns=draw(st.integers(1, 12)),
        max_prompt_tokens=100_000,
        max_output_tokens=draw(st.integers(1, 400)),
        max_cost=own_cost,
    )
    lookups = (LOOKUP,) * draw(st.integers(0, 4))
    model = draw(st.sampled_from([ModelSpec(name="wanderer"), ModelSpec(turns=(*lookups, DONE))]))
    judges = ()
    if draw(st.booleans()):  # a judge with its own price and reply cap: its calls are spent from the same budget
        judge_price = Prices(default=Price(input=draw(cents) * 100, output=draw(cents) * 1000))
        cap = draw(st.integers(1, 400))
        judges = (Judge(ScriptedModel([VERDICT]), "Be fair.", prices=judge_price, max_output_tokens=cap),)
    return Case(f"c{index}", "Investigate A-17.", judges, model=model, gate="refund", limits=limits, prices=PRICES)


@st.composite
def evals(draw):
    count = draw(st.integers(1, 4))
    return Dataset("prop", [draw(cases(i)) for i in range(count)], repeat=draw(st.integers(1, 3)))


@given(
    dataset=evals(),
    money=cents,
    turns=st.none() | st.integers(0, 30),
    concurrency=st.integers(1, 4),
)
def test_money_and_turns_summed_over_every_run_never_pass_the_budget(dataset, money, turns, concurrency):
    """However cases, judges, repeats, own limits and concurrency are drawn, the eval spends at most its budget."""
    budget = EvalBudget(max_cost=money, max_turns=turns)
    report = run_eval(dataset, environment, budget=budget, concurrency=concurrency)
    runs = report.runs
    judged = [s for r in runs for s in r.scores if s.value is not None]
    unpaid = [s for r in runs for s in r.scores if s.value is None]
    assert all(s.reason == "budget spent" and not s.passed for s in unpaid)
    assert report.spent_cost <= money
    assert report.spent_cost == sum((r.cost for r in runs), Decimal(0)) + report.judge_cost
    assert report.spent_turns == sum(r.turns for r in runs) + len(judged)  # one model call per judge verdict
    if turns is not None:
        assert report.spent_turns <= turns
    # Every run is accounted for: it ran, or it was not started because the budget was spent.
    assert len(runs) == len(dataset.cases) * dataset.repeat
    assert all((r.skipped is None) == (r.stop is not None) for r in runs)
