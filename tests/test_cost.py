"""A money budget: each model call charged from its usage figures, the worst case checked before the call is made."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_fsm import (
    Agent,
    Charged,
    Limits,
    ModelReplied,
    ModelReply,
    ModelRequested,
    Price,
    Prices,
    RunError,
    RunEvent,
    RunState,
    ScriptedModel,
    Stop,
    ToolSpec,
    Usage,
    answer_message,
    estimate_tokens,
    tool_call_message,
)
from agent_fsm.engine import RunContext

PRICE = Price(input=Decimal("2.50"), output=Decimal("10.00"), cached_input=Decimal("1.25"))
TOOLS = {"look": ToolSpec("Look something up.", {"key": str}, lambda key: f"value of {key}")}


class Reporting:
    """A model that replies from a script and reports the usage figures it is given, turn by turn."""

    model = "gpt-test"

    def __init__(self, replies: Sequence[Mapping[str, Any]], figures: Sequence[tuple[Any, Any, Any]]) -> None:
        self.replies = list(replies)
        self.figures = list(figures)
        self.asked: list[dict[str, Any]] = []

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = (), **kw: Any) -> Any:
        self.asked.append(kw)
        turn = sum(m.get("role") == "assistant" for m in messages)
        prompt, output, cached = self.figures[min(turn, len(self.figures) - 1)]
        reply = self.replies[min(turn, len(self.replies) - 1)]
        return ModelReply(reply, prompt_tokens=prompt, output_tokens=output, cached_tokens=cached)


def _look(turn: int) -> dict[str, Any]:
    return tool_call_message(f"c{turn}", "look", {"key": f"k{turn}"})


def test_each_call_is_charged_from_the_providers_figures() -> None:
    """Tokens in, out and cached add up across calls; the cost is priced per million, cached input cheaper."""
    model = Reporting([_look(0), answer_message("done")], [(1000, 50, 400), (1200, 20, None)])
    agent = Agent(model, TOOLS, prices=Prices({"gpt-test": PRICE}))
    result = agent.run("look")
    assert result.stop is Stop.ANSWERED
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (2200, 70, 400)
    first = (600 * Decimal("2.50") + 400 * Decimal("1.25") + 50 * Decimal("10.00")) / 1_000_000
    second = (1200 * Decimal("2.50") + 20 * Decimal("10.00")) / 1_000_000
    assert usage.cost == first + second
    assert usage.tokens == 2270


def test_without_figures_the_estimates_are_charged() -> None:
    """A model that reports nothing is charged its prompt estimate and its reply's measured size."""
    model = ScriptedModel([answer_message("a short answer")])
    events: list[RunEvent] = []
    result = Agent(model, {}, prices=Prices(default=PRICE)).run("hi", on_event=events.append)
    [requested] = [e for e in events if isinstance(e, ModelRequested)]
    [charged] = [e for e in events if isinstance(e, Charged)]
    assert charged.input_tokens == requested.prompt_tokens == result.usage.input_tokens
    assert charged.output_tokens == result.usage.output_tokens > 0
    assert charged.model is None and Decimal(charged.total) == result.usage.cost > 0


def test_a_run_without_prices_counts_tokens_and_costs_nothing() -> None:
    """Tokens are reported for every run; money only under a price table."""
    result = Agent(ScriptedModel([answer_message("ok")]), {}).run("hi")
    assert result.usage.tokens > 0 and result.usage.cost == 0


def test_the_call_that_could_pass_the_budget_is_not_made() -> None:
    """Before each call the worst case is priced; the run ends cost_limit with the budget not passed."""
    model = Reporting([_look(i) for i in range(20)], [(100, 10, 0)])
    limits = Limits(max_turns=20, max_prompt_tokens=100_000, max_output_tokens=100, max_cost=Decimal("0.005"))
    result = Agent(model, TOOLS, limits=limits, prices=Prices(default=PRICE)).run("look")
    assert result.stop is Stop.COST_LIMIT and result.code == "cost_limit"
    assert result.usage.cost <= Decimal("0.005")
    worst = PRICE.worst_case(result.state.message_tokens + 40, 100)  # more than the next prompt's estimate at least
    assert result.usage.cost + worst > Decimal("0.005") - Decimal("0.002")
    assert result.reason is not None and "of the 0.005 cost budget spent" in result.reason
    assert len(model.asked) == result.state.turns


def test_the_output_cap_is_passed_to_a_model_that_takes_it() -> None:
    """A model declaring takes_output_cap is told max_output_tokens; the others are not."""
    model = Reporting([answer_message("ok")], [(10, 5, 0)])
    model.takes_output_cap = True  # type: ignore[attr-defined]
    Agent(model, {}, limits=Limits(max_output_tokens=77)).run("hi")
    assert model.asked == [{"max_output_tokens": 77}]
    plain = Reporting([answer_message("ok")], [(10, 5, 0)])
    Agent(plain, {}, limits=Limits(max_output_tokens=77)).run("hi")
    assert plain.asked == [{}]


def test_a_budget_is_a_decimal_with_an_output_cap() -> None:
    """A float budget is refused (money does not round), and so is a budget with no output cap to bound a call."""
    with pytest.raises(TypeError, match="Decimal"):
        Limits(max_cost=0.5, max_output_tokens=10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_output_tokens"):
        Limits(max_cost=Decimal("0.5"))
    with pytest.raises(TypeError, match="Decimal"):
        Price(input=Decimal("NaN"), output=Decimal(1))


def test_a_budget_without_prices_fails_loudly_with_the_state() -> None:
    """max_cost with no price for the model is a set-up mistake, raised with the run's state."""
    limits = Limits(max_output_tokens=10, max_cost=Decimal(1))
    with pytest.raises(RunError, match="needs prices") as caught:
        Agent(ScriptedModel([answer_message("ok")]), {}, limits=limits).run("hi")
    assert caught.value.state is not None
    with pytest.raises(RunError, match="no price for the model 'gpt-test'"):
        Agent(Reporting([answer_message("ok")], [(1, 1, 0)]), {}, limits=limits, prices=Prices()).run("hi")


def test_usage_and_the_budget_survive_a_save() -> None:
    """The saved state keeps the usage and the budget as decimal text, and reads them back equal."""
    limits = Limits(max_output_tokens=100, max_cost=Decimal("0.0000001"))
    state = RunState(limits=limits, usage=Usage(10, 2, 1, Decimal("0.00000003")))
    text = state.to_json()
    data = json.loads(text)
    assert data["limits"]["max_cost"] == "0.0000001" and data["usage"]["cost"] == "0.00000003"
    assert RunState.from_json(text) == state


@pytest.mark.parametrize(
    ("place", "value", "problem"),
    [
        ("cost", 0.5, "decimal text"),
        ("cost", "1e5", "decimal text"),
        ("cost", "-1", "decimal text"),
        ("cost", "NaN", "decimal text"),
        ("input_tokens", -1, "whole number >= 0"),
        ("surprise", 1, "unknown field"),
    ],
)
def test_the_strict_reader_refuses_a_bad_usage(place: str, value: Any, problem: str) -> None:
    """A forged usage record is refused with its dotted path, never coerced."""
    data = json.loads(RunState().to_json())
    data["usage"][place] = value
    with pytest.raises(ValueError, match=f"usage.{place}.*{problem}"):
        RunState.from_json(json.dumps(data))


def test_a_budget_saved_as_a_float_is_refused() -> None:
    """The saved budget is decimal text: a float there was not written by this engine."""
    data = json.loads(RunState(limits=Limits(max_output_tokens=5, max_cost=Decimal("0.5"))).to_json())
    data["limits"]["max_cost"] = 0.5
    with pytest.raises(ValueError, match="limits.max_cost"):
        RunState.from_json(json.dumps(data))


def test_a_state_saved_before_usage_loads_with_nothing_spent() -> None:
    """The usage, tool counts and fallback position were added later: an older state loads without them."""
    data = json.loads(RunState().to_json())
    for name in ("usage", "tool_uses", "model_attempt"):
        del data[name]
    state = RunState.from_json(json.dumps(data))
    assert state.usage == Usage() and state.tool_uses == {} and state.model_attempt == 0


# --- the property: whatever the figures, the budget is never passed ---------------------------------------


class Honest:
    """
    A model that replies at random and reports random usage figures a provider could honestly report.

    Honest means: the prompt it reports is at most what the engine estimated
    (a provider counting a cached prefix, or the same count), the output at
    most the cap it was given; any figure may also be missing.
    """

    def __init__(self, draw: Any, cap: int) -> None:
        self.draw = draw
        self.cap = cap
        self.estimate = 0

    def hear(self, event: RunEvent) -> None:
        if isinstance(event, ModelRequested):
            self.estimate = event.prompt_tokens

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        draw = self.draw
        turn = sum(m.get("role") == "assistant" for m in messages)
        words = draw(st.integers(0, 60), label="words")
        if draw(st.booleans(), label="answers"):
            message = answer_message(" ".join(["word"] * words) or "ok")
        else:
            message = tool_call_message(f"c{turn}", "look", {"key": "x" * words})
        prompt = draw(st.none() | st.integers(max(1, self.estimate // 4), max(1, self.estimate)), label="prompt")
        output = draw(st.none() | st.integers(0, self.cap), label="output")
        cached = draw(st.none() | st.integers(0, prompt or 0), label="cached")
        return ModelReply(message, prompt_tokens=prompt, output_tokens=output, cached_tokens=cached)


amounts = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("50"), places=2)


@settings(deadline=None)
@given(
    data=st.data(),
    price=st.builds(Price, input=amounts, output=amounts, cached_input=st.none() | amounts),
    budget=st.decimals(min_value=Decimal(0), max_value=Decimal("0.05"), places=6),
    cap=st.integers(1, 400),
)
def test_the_cost_budget_is_never_passed(data: st.DataObject, price: Price, budget: Decimal, cap: int) -> None:
    """Random replies, random usage figures (or none), random prices and budgets: spent never exceeds max_cost."""
    model = Honest(data.draw, cap)
    limits = Limits(max_turns=12, max_prompt_tokens=100_000, max_output_tokens=cap, max_cost=budget)
    charged: list[Decimal] = []

    def hear(event: RunEvent) -> None:
        model.hear(event)
        if isinstance(event, Charged):
            charged.append(Decimal(event.cost))

    result = Agent(model, TOOLS, limits=limits, prices=Prices(default=price)).run("look", on_event=hear)
    assert result.usage.cost <= budget
    assert result.usage.cost == sum(charged, Decimal(0))  # each call charged once, in the state as in the events
    assert result.stop in (Stop.ANSWERED, Stop.COST_LIMIT, Stop.STEP_LIMIT, Stop.NO_PROGRESS)
    if result.stop is Stop.COST_LIMIT:  # stopped only when the next call's worst case did not fit
        pending = RunContext(result.state, model, TOOLS, None, limits, estimate_tokens)
        assert result.usage.cost + price.worst_case(pending.next_prompt_tokens(), cap) > budget


def test_events_say_the_reply_then_its_charge() -> None:
    """Each model reply is followed by its Charged event, whose running total ends at the run's cost."""
    model = Reporting([_look(0), answer_message("done")], [(100, 10, 0)])
    events: list[RunEvent] = []
    result = Agent(model, TOOLS, prices=Prices(default=PRICE)).run("look", on_event=events.append)
    kinds = [type(e).__name__ for e in events if isinstance(e, (ModelReplied, Charged))]
    assert kinds == ["ModelReplied", "Charged", "ModelReplied", "Charged"]
    assert Decimal([e for e in events if isinstance(e, Charged)][-1].total) == result.usage.cost


# --- usage figures are checked where they enter -------------------------------------------------

HOSTILE_FIGURES = [1.5, "100", float("inf"), float("nan"), -1, True, 10**4400, 10**13, [7]]
HOSTILE_NAMES = ["float", "text", "inf", "nan", "negative", "bool", "4401_digits", "ten_trillion", "list"]


class Replying:
    """A model whose every reply is the one ModelReply it was given (then, past it, a plain answer)."""

    model = "gpt-test"

    def __init__(self, replies: Sequence[Any]) -> None:
        self.replies = list(replies)

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        turn = sum(m.get("role") == "assistant" for m in messages)
        return self.replies[turn] if turn < len(self.replies) else answer_message("done")


@pytest.mark.parametrize("field", ["prompt_tokens", "output_tokens", "cached_tokens"])
@pytest.mark.parametrize("value", HOSTILE_FIGURES, ids=HOSTILE_NAMES)
def test_a_usage_figure_that_is_not_a_count_is_a_provider_fault(field: str, value: Any) -> None:
    """A float, text, infinity, negative, bool or absurd count: the reply is refused as a bad_response, never taken."""
    reply = ModelReply(_look(0), **{field: value})
    result = Agent(Replying([reply]), TOOLS, prices=Prices(default=PRICE)).run("look")
    assert result.stop is Stop.PROVIDER_ERROR and field in (result.reason or "")
    assert result.state.fault is not None and result.state.fault.kind == "bad_response"
    assert result.state.observations == [] and result.usage.tokens == 0  # nothing of the reply was taken
    assert RunState.from_json(result.state.to_json()) == result.state


@pytest.mark.parametrize("finish", [7, float("inf"), ["stop"]])
def test_a_finish_that_is_not_text_is_a_provider_fault(finish: Any) -> None:
    """How a reply ended is a word or nothing; anything else is the provider's fault, and the state still saves."""
    result = Agent(Replying([ModelReply(answer_message("hi"), finish=finish)]), TOOLS).run("look")
    assert result.stop is Stop.PROVIDER_ERROR and "finish" in (result.reason or "")
    assert RunState.from_json(result.state.to_json()) == result.state


def test_a_stored_run_given_a_hostile_count_ends_recorded_not_running(tmp_path: Any) -> None:
    """A 4,401-digit count: the stored run ends provider_error and reads back; it is never stranded running."""
    from agent_fsm.store import SqliteStore

    store = SqliteStore(tmp_path / "runs.db")
    model = Replying([ModelReply(_look(0), prompt_tokens=10**4400, output_tokens=10**4400)])
    result = Agent(model, TOOLS, prices=Prices(default=PRICE)).run("look", store=store, run_id="r1")
    assert result.stop is Stop.PROVIDER_ERROR
    stored = store.load("r1")
    assert stored.status != "running" and stored.state == result.state


def _hostile_figure() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.integers(0, 5000),
        st.integers(-(10**6), 10**4400),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=4),
        st.booleans(),
    )


@settings(deadline=None, max_examples=60)
@given(
    replies=st.lists(
        st.builds(
            ModelReply,
            st.sampled_from([_look(0), _look(1), answer_message("done"), {"role": "assistant", "content": None}]),
            prompt_tokens=_hostile_figure(),
            finish=st.none() | st.sampled_from(["stop", "length", "tool_calls", "refusal"]) | st.integers(),
            output_tokens=_hostile_figure(),
            cached_tokens=_hostile_figure(),
            model=st.none() | st.just("gpt-test") | st.integers(),
        ),
        max_size=4,
    ),
    priced=st.booleans(),
)
def test_every_state_made_from_hostile_replies_round_trips(replies: list[ModelReply], priced: bool) -> None:
    """Whatever figures a provider reports, the run ends typed and its state saves and reads back equal."""
    agent = Agent(Replying(replies), TOOLS, prices=Prices(default=PRICE) if priced else None)
    result = agent.run("look")
    assert RunState.from_json(result.state.to_json()) == result.state
