"""Limits(wrap_up=True): the last model call the turn budget admits is a wrap-up with no tools, coded wrap_up."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import (
    Agent,
    Limits,
    ModelReply,
    Price,
    Prices,
    RunState,
    ScriptedModel,
    Stop,
    ToolSpec,
    Verdict,
    answer_message,
    drop_middle,
    tool_call_message,
)
from agent_fsm.engine._spending import WRAP_UP, WRAP_UP_NOTE
from agent_fsm.store import approve
from agent_fsm.testing import (
    InvariantViolation,
    ManualClock,
    assert_run_invariants,
    limits,
    prices,
    scripted_models,
)

LOOKUP = tool_call_message("w", "balance", {"account": "ACME"})


class Recording(ScriptedModel):
    """A scripted model that keeps the tools each call offered."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.offered: list[list[str]] = []

    def chat(self, messages, tools=()):
        self.offered.append([t["function"]["name"] for t in tools])
        return super().chat(messages, tools)


def _agent(replies, **limits) -> tuple[Agent, Recording]:
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 12000)}
    model = Recording(replies)
    return Agent(model, tools, limits=Limits(max_turns=3, wrap_up=True, **limits)), model


def _go(agent: Agent, driver: str, store=None, run_id: str | None = None):
    """Run ``agent`` on the sync or the async driver, kept in ``store`` when one is given."""
    kept = {} if store is None else {"store": store, "run_id": run_id}
    return agent.run("Check.", **kept) if driver == "sync" else asyncio.run(agent.arun("Check.", **kept))


def test_the_last_turn_offers_no_tools_and_its_answer_is_coded_wrap_up():
    """Turn 3 of 3 is the wrap-up: no tools offered, the note sent, the answer ends answered with code wrap_up."""
    agent, model = _agent([LOOKUP, LOOKUP, answer_message("12000 cents")])
    result = agent.run("Check the balance.")
    assert (result.stop, result.code, result.answer) == (Stop.ANSWERED, WRAP_UP, "12000 cents")
    assert model.offered == [["balance"], ["balance"], []]
    assert result.state.messages[-2] == {"role": "user", "content": WRAP_UP_NOTE}
    assert result.state.path[-2:] == ["WrappingUp", "Answered"]


def test_a_call_proposed_at_the_wrap_up_ends_step_limit_and_is_not_run():
    """The model still proposes a call: the run ends step_limit as without wrap-up, the call answered as not run."""
    agent, _ = _agent([LOOKUP, LOOKUP, LOOKUP])
    result = agent.run("Check the balance.")
    assert result.stop is Stop.STEP_LIMIT and result.code == "step_limit"
    assert [o.kind for o in result.state.observations] == ["result", "result", "denied"]
    assert result.state.tool_attempts == 2


def test_an_answer_before_the_last_turn_is_a_normal_answer():
    """A run that answers early never enters WrappingUp: its code is answered."""
    agent, _ = _agent([answer_message("done")])
    result = agent.run("Check the balance.")
    assert result.code == "answered" and "WrappingUp" not in result.state.path


def test_without_the_option_the_run_ends_step_limit_as_before():
    """wrap_up defaults to False: the third call offers tools, and a third lookup ends step_limit."""
    assert Limits().wrap_up is False
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 12000)}
    result = Agent(ScriptedModel([LOOKUP] * 3), tools, limits=Limits(max_turns=3)).run("Check.")
    assert result.stop is Stop.STEP_LIMIT and "WrappingUp" not in result.state.path


def test_the_async_driver_wraps_up_the_same_way():
    """arun: the same ending, code and offered tools."""
    agent, model = _agent([LOOKUP, LOOKUP, answer_message("12000 cents")])
    result = asyncio.run(agent.arun("Check the balance."))
    assert (result.stop, result.code) == (Stop.ANSWERED, WRAP_UP) and model.offered[-1] == []


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_the_option_is_saved_and_the_wrap_up_works_with_a_store(driver, opener):
    """A run kept in a store wraps up (the turns' trigger); the limits it ran under, wrap_up included, read back."""
    agent, _ = _agent([LOOKUP, LOOKUP, answer_message("12000 cents")])
    result = _go(agent, driver, opener(), "w1")
    kept = opener().load("w1").state
    assert kept.code == WRAP_UP and kept.limits is not None and kept.limits.wrap_up is True
    assert RunState.from_json(result.state.to_json()).limits == result.state.limits


def test_the_kits_invariant_checks_the_wrap_up_code():
    """assert_run_invariants passes a true wrap-up, and fails it when held to limits that admit more turns."""
    agent, _ = _agent([LOOKUP, LOOKUP, answer_message("12000 cents")])
    result = agent.run("Check the balance.")
    assert_run_invariants(result, limits=Limits(max_turns=3, wrap_up=True))
    with pytest.raises(InvariantViolation) as caught:
        assert_run_invariants(result, limits=Limits(max_turns=4, wrap_up=True))
    assert caught.value.invariant == "stop_justified"


@given(drawn=limits(max_turns=(1, 5), wrap_up=True))
def test_drawn_limits_with_wrap_up_keep_the_invariants(drawn: Limits):
    """Under any drawn limits with wrap-up, the run keeps every invariant: no prompt passes its budget for the note."""
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 12000)}
    model = ScriptedModel([LOOKUP] * (drawn.max_turns - 1) + [answer_message("12000 cents")])
    result = Agent(model, tools, limits=drawn).run("Check.")
    assert_run_invariants(result, limits=drawn)
    if result.code == WRAP_UP:  # else the note did not fit the budgets and the last turn was a normal one
        assert result.state.path[-2:] == ["WrappingUp", "Answered"]


def test_no_wrap_up_when_the_note_would_pass_the_prompt_budget():
    """A last prompt with no room for the note (an agent with no tools to leave out) is sent as a normal turn."""
    model = Recording([answer_message("done")])
    result = Agent(model, {}, limits=Limits(max_turns=1, max_prompt_tokens=100, wrap_up=True)).run("Check.")
    assert result.stop is Stop.ANSWERED and result.code == "answered" and "WrappingUp" not in result.state.path
    assert max(result.state.prompt_token_log) <= 100
    roomy = Agent(Recording([answer_message("done")]), {}, limits=Limits(max_turns=1, wrap_up=True)).run("Check.")
    assert roomy.code == WRAP_UP


class Metered(Recording):
    """A recording model that reports five output tokens per reply (input is free under the test's price)."""

    def chat(self, messages, tools=()):
        return ModelReply(super().chat(messages, tools), output_tokens=5)


def _costly(replies) -> tuple[Agent, Metered]:
    # Worst case of any call: 10 output tokens at 1 a token = 10; 28 admits two such calls after 5 spent, not after 10.
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 12000)}
    model = Metered(replies)
    price = Price(input=Decimal(0), output=Decimal(1_000_000))
    limits = Limits(max_turns=8, max_output_tokens=10, max_cost=Decimal(28), wrap_up=True)
    return Agent(model, tools, limits=limits, prices=Prices(default=price)), model


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_the_call_the_money_left_admits_last_is_the_wrap_up(driver, opener):
    """After 10 spent of 28, one worst case (10) fits and two do not: call 3 offers no tools, coded wrap_up, kept."""
    agent, model = _costly([LOOKUP, LOOKUP, answer_message("12000 cents")])
    result = _go(agent, driver, opener(), "m1")
    assert opener().load("m1").state.code == WRAP_UP
    assert (result.stop, result.code, result.answer) == (Stop.ANSWERED, WRAP_UP, "12000 cents")
    assert model.offered == [["balance"], ["balance"], []] and result.usage.cost == 15
    assert_run_invariants(result, limits=agent.limits)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_call_proposed_at_a_wrap_up_for_money_ends_cost_limit(driver, opener):
    """The model proposes a call at the wrap-up the money called: the run ends cost_limit, the call not run."""
    agent, _ = _costly([LOOKUP, LOOKUP, LOOKUP])
    result = _go(agent, driver, opener(), "m2")
    assert opener().load("m2").summary.stop == "cost_limit"
    assert (result.stop, result.code) == (Stop.COST_LIMIT, "cost_limit") and result.state.tool_attempts == 2
    assert_run_invariants(result, limits=agent.limits)


def _slow(replies, clock: ManualClock | None = None) -> tuple[Agent, Recording]:
    # A lookup takes 0.8 s of a 2 s budget: after it, 1.2 s is left, less than two turns at that pace.
    def balance(account: str) -> int:
        if clock is None:
            time.sleep(0.8)
        else:
            clock.advance(0.8)
        return 1

    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, balance)}
    model = Recording(replies)
    return Agent(model, tools, limits=Limits(max_turns=8, max_seconds=2.0, wrap_up=True), clock=clock), model


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_the_call_the_time_left_admits_last_is_the_wrap_up(driver, opener):
    """Less time left than two turns at the run's pace: call 2 offers no tools, its answer coded wrap_up, kept."""
    agent, model = _slow([LOOKUP, answer_message("1 cent")], ManualClock())
    result = _go(agent, driver, opener(), "t1")
    assert (result.stop, result.code, result.answer) == (Stop.ANSWERED, WRAP_UP, "1 cent")
    assert model.offered == [["balance"], []] and result.state.path[-2:] == ["WrappingUp", "Answered"]
    assert opener().load("t1").state.code == WRAP_UP
    assert_run_invariants(result, limits=agent.limits)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_call_proposed_at_a_wrap_up_for_time_ends_time_limit(driver, opener):
    """The model proposes a call at the wrap-up the clock called: the run ends time_limit, the call not run."""
    agent, _ = _slow([LOOKUP, LOOKUP], ManualClock())
    result = _go(agent, driver, opener(), "t2")
    assert (result.stop, result.code) == (Stop.TIME_LIMIT, "time_limit") and result.state.tool_attempts == 1
    assert result.state.path[-2:] == ["WrappingUp", "TimeLimit"] and opener().load("t2").summary.stop == "time_limit"
    assert_run_invariants(result, limits=agent.limits)


def test_the_time_trigger_reads_the_real_clock_by_default():
    """With no clock given the time budget reads time.monotonic: a lookup sleeping 0.8 s of 2 s calls the wrap-up."""
    agent, model = _slow([LOOKUP, answer_message("1 cent")])
    result = agent.run("Check.")
    assert result.code == WRAP_UP and model.offered == [["balance"], []] and 0.8 <= result.state.elapsed < 2.0


def test_a_clock_must_be_callable_and_a_manual_clock_only_goes_forward():
    """Agent(clock=...) refuses what cannot be called; ManualClock steps at each reading and refuses going back."""
    with pytest.raises(TypeError, match="'clock' must be callable or None"):
        Agent(ScriptedModel([]), {}, clock=3.0)
    clock = ManualClock(10.0, step=0.5)
    assert clock() == 10.5 and clock() == 11.0
    clock.advance(2.0)
    assert clock() == 13.5
    with pytest.raises(ValueError, match="forward only"):
        clock.advance(-1.0)


def _dear_tools(replies, **limits) -> tuple[Agent, Recording]:
    # Input at 1 a token, output free: the tool declarations (168 tokens) make a normal call dearer than the wrap-up.
    tools = {"balance": ToolSpec("Read a balance in cents. " * 20, {"account": str}, lambda account: 1)}
    model = Recording(replies)
    price = Prices(default=Price(input=Decimal(1_000_000), output=Decimal(0)))
    chosen = Limits(max_turns=8, max_output_tokens=1, max_cost=Decimal(200), wrap_up=True, **limits)
    return Agent(model, tools, limits=chosen, prices=price), model


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_the_wrap_up_wins_when_a_normal_call_would_pass_the_money_but_it_fits(driver, opener):
    """A normal first call (255 tokens) would pass max_cost=200, the wrap-up without declarations fits: it is made."""
    agent, model = _dear_tools([answer_message("1 cent")])
    result = _go(agent, driver, opener(), "c1")
    assert (result.stop, result.code, result.answer) == (Stop.ANSWERED, WRAP_UP, "1 cent")
    assert model.offered == [[]] and result.usage.cost <= 200
    assert opener().load("c1").state.code == WRAP_UP
    assert_run_invariants(result, limits=agent.limits)


def test_without_wrap_up_the_same_run_ends_cost_limit():
    """The same budget without the option: the normal call's worst case does not fit, no call is made."""
    agent, model = _dear_tools([answer_message("1 cent")])
    result = agent.replace(limits=attrs.evolve(agent.limits, wrap_up=False)).run("Check.")
    assert result.stop is Stop.COST_LIMIT and model.offered == []


def _ten_a_message(message) -> int:
    """Ten tokens a message (and a tool declaration): each turn adds twenty, the note ten."""
    return 10


def _growing(replies, **options) -> tuple[Agent, Recording]:
    # Prompts of 30, 50, 70 tokens: after two turns, 70 plus the average growth (20) passes 85; 70 fits.
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 1)}
    model = Recording(replies)
    chosen = Limits(max_turns=8, max_prompt_tokens=85, wrap_up=True)
    return Agent(model, tools, limits=chosen, estimator=_ten_a_message, **options), model


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_the_call_the_prompt_budget_admits_last_is_the_wrap_up(driver, opener):
    """The third prompt (70) fits 85 but the fourth would not at the growth so far: call 3 is the wrap-up, kept."""
    agent, model = _growing([LOOKUP, LOOKUP, answer_message("1 cent")])
    result = _go(agent, driver, opener(), "p1")
    assert (result.stop, result.code, result.answer) == (Stop.ANSWERED, WRAP_UP, "1 cent")
    assert model.offered == [["balance"], ["balance"], []] and result.state.prompt_token_log == [30, 50, 70]
    assert opener().load("p1").state.code == WRAP_UP
    assert_run_invariants(result, limits=agent.limits)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_call_proposed_at_a_wrap_up_for_tokens_ends_token_limit(driver, opener):
    """The model proposes a call at the wrap-up the prompt's growth called: token_limit, the call not run."""
    agent, _ = _growing([LOOKUP, LOOKUP, LOOKUP])
    result = _go(agent, driver, opener(), "p2")
    assert (result.stop, result.code) == (Stop.TOKEN_LIMIT, "token_limit") and result.state.tool_attempts == 2
    assert result.state.path[-2:] == ["WrappingUp", "TokenLimit"] and opener().load("p2").summary.stop == "token_limit"
    assert_run_invariants(result, limits=agent.limits)


def _lean_declarations(message) -> int:
    """Ten tokens a message, five for the note, twenty for a tool declaration: the wrap-up is the smaller call."""
    if message.get("type") == "function":
        return 20
    return 5 if message.get("content") == WRAP_UP_NOTE else 10


@pytest.mark.parametrize("wrap_up", [True, False])
def test_the_wrap_up_wins_when_only_the_tool_declarations_pass_the_prompt_budget(wrap_up):
    """A first prompt of 40 (20 of it declarations) passes 29; the wrap-up's (20 and a note of 5) fits: it is made."""
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 1)}
    model = Recording([answer_message("nothing looked up")])
    limits = Limits(max_prompt_tokens=29, wrap_up=wrap_up)
    result = Agent(model, tools, limits=limits, estimator=_lean_declarations).run("Check.")
    if wrap_up:
        assert (result.stop, result.code) == (Stop.ANSWERED, WRAP_UP) and model.offered == [[]]
        assert result.state.prompt_token_log == [25]
    else:
        assert result.stop is Stop.TOKEN_LIMIT and model.offered == []


class InOrder(Recording):
    """A recording model that plays its replies in the order it is called, whatever the prompt it is sent."""

    def chat(self, messages, tools=()):
        self.offered.append([t["function"]["name"] for t in tools])
        return self.turns[min(len(self.offered), len(self.turns)) - 1]


def test_the_prompt_trigger_is_off_under_compaction():
    """An agent that compacts keeps its prompt within budget itself: its prompt's growth calls no wrap-up."""
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 1)}
    model = InOrder([LOOKUP, LOOKUP, LOOKUP, answer_message("1 cent")])
    limits = Limits(max_turns=8, max_prompt_tokens=85, wrap_up=True)
    agent = Agent(model, tools, limits=limits, estimator=_ten_a_message, compact=drop_middle(keep=1))
    result = agent.run("Check.")
    assert result.code == "answered" and "WrappingUp" not in result.state.path
    assert model.offered[2] == ["balance"] and result.state.compactions


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_compaction_due_on_the_last_turn_is_skipped_when_the_wrap_up_fits_without_it(driver, opener):
    """Turn 3 of 3 passes compact_at=60 but its wrap-up fits max_prompt_tokens: no compaction, the last word at once."""
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 1)}
    model = InOrder([LOOKUP, LOOKUP, answer_message("1 cent")])
    limits = Limits(max_turns=3, max_prompt_tokens=85, wrap_up=True)
    agent = Agent(model, tools, limits=limits, estimator=_ten_a_message, compact=drop_middle(keep=1), compact_at=60)
    result = _go(agent, driver, opener(), "d1")
    assert (result.code, model.offered[-1]) == (WRAP_UP, []) and not result.state.compactions
    assert result.state.path[-3:] == ["Ready", "WrappingUp", "Answered"] and result.state.prompt_token_log[-1] == 70


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_the_last_turn_compacts_first_when_the_wrap_up_fits_only_compacted(driver, opener):
    """Turn 4 of 4: the wrap-up (90) passes 85, so the prompt is compacted first and the last word sent compacted."""
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 1)}
    model = InOrder([LOOKUP, LOOKUP, LOOKUP, answer_message("1 cent")])
    limits = Limits(max_turns=4, max_prompt_tokens=85, wrap_up=True)
    agent = Agent(model, tools, limits=limits, estimator=_ten_a_message, compact=drop_middle(keep=1))
    result = _go(agent, driver, opener(), "d2")
    assert (result.code, model.offered[-1]) == (WRAP_UP, []) and len(result.state.compactions) == 1
    assert result.state.path[-3:] == ["Compacting", "WrappingUp", "Answered"]
    assert result.state.prompt_token_log[-1] <= 85 and opener().load("d2").state.code == WRAP_UP
    assert_run_invariants(result, limits=agent.limits)


CENTS = {"type": "object", "properties": {"cents": {"type": "integer"}}, "required": ["cents"]}
PAY = tool_call_message("p", "pay", {"cents": 1})


def _typed(replies) -> Agent:
    """An agent whose answer is typed (CENTS) and whose payment a person approves; its second call is the wrap-up."""
    tools = {"pay": ToolSpec("Pay cents.", {"cents": int}, lambda cents: "paid", effectful=True)}
    limits = Limits(max_turns=2, wrap_up=True)
    return Agent(
        Recording(replies), tools, gate=lambda call: Verdict("ask", "a person pays"), limits=limits, output=CENTS
    )


def _paused_then_approved(agent: Agent, driver: str, opener, run_id: str):
    """Start the run in a store (it pauses on the payment), then approve it from a fresh store object."""
    paused = agent.run("Pay.", store=opener(), run_id=run_id)
    assert paused.stop is Stop.AWAITING_APPROVAL
    if driver == "sync":
        return approve(opener(), run_id, agent, reviewer="ana")
    store = opener()
    decided = store.decide(run_id, store.load(run_id).summary.pause_id, "approve", reviewer="ana")
    return asyncio.run(agent.aresume(decided.state, approve=True, store=store, run_id=run_id))


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_typed_wrap_up_answer_is_the_runs_output_after_a_stored_pause(driver, opener):
    """Approved from the store, the run wraps up: its JSON answer validates, is the output, kept coded wrap_up."""
    agent = _typed([PAY, answer_message('{"cents": 1}')])
    result = _paused_then_approved(agent, driver, opener, "o1")
    assert (result.stop, result.code, result.output) == (Stop.ANSWERED, WRAP_UP, {"cents": 1})
    assert agent.model.offered[-1] == [] and result.state.path[-2:] == ["WrappingUp", "Answered"]
    kept = opener().load("o1").state
    assert (kept.code, kept.output) == (WRAP_UP, {"cents": 1})
    assert_run_invariants(result, limits=agent.limits)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_wrap_up_answer_that_is_not_the_typed_output_ends_output_invalid(driver, opener):
    """The last word is not valid output: no turn is left to send it back, it ends answer_rejected, output_invalid."""
    agent = _typed([PAY, answer_message("one cent")])
    result = _paused_then_approved(agent, driver, opener, "o2")
    assert (result.stop, result.code, result.output) == (Stop.ANSWER_REJECTED, "output_invalid", None)
    assert result.state.path[-2:] == ["WrappingUp", "AnswerRejected"] and result.state.output_rejections == 0
    assert opener().load("o2").state.code == "output_invalid"
    assert_run_invariants(result, limits=agent.limits)


class StallsAtTheWrapUp(Recording):
    """A model that looks a balance up, then never answers the wrap-up (the call offered no tools) until cancelled."""

    async def achat(self, messages, tools=()):
        self.offered.append([t["function"]["name"] for t in tools])
        if not tools:
            await asyncio.sleep(60)
        return LOOKUP


def test_a_wrap_up_cancelled_in_flight_goes_on_from_the_store_with_one_note(opener):
    """Cancelled while the model writes its last word, the stored run goes on to a wrap-up that sends the note once."""
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 1)}
    agent = Agent(StallsAtTheWrapUp([]), tools, limits=Limits(max_turns=2, wrap_up=True))
    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(agent.arun("Check.", store=opener(), run_id="x1"), timeout=0.5))
    kept = opener().load("x1").state
    assert kept.machine_state == "Ready" and kept.turns == 1
    store = opener()
    stored = store.claim_stale(0)[0].state
    result = agent.replace(model=InOrder([answer_message("1 cent")])).advance(stored, store=store, run_id="x1")
    assert (result.stop, result.code, result.answer) == (Stop.ANSWERED, WRAP_UP, "1 cent")
    notes = [m for m in result.state.messages if m == {"role": "user", "content": WRAP_UP_NOTE}]
    assert len(notes) == 1 and result.state.turns == 2
    assert_run_invariants(result, limits=agent.limits)


class AnswersOnlyAtTheWrapUp(Recording):
    """Looks the balance up whenever tools are offered; answers only when offered none (the wrap-up)."""

    def chat(self, messages, tools=()):
        self.offered.append([t["function"]["name"] for t in tools])
        return LOOKUP if tools else answer_message("1 cent")


@given(most=st.integers(0, 700), turns=st.integers(1, 40))
def test_the_prompt_trigger_makes_the_last_call_that_fits_the_wrap_up(most: int, turns: int):
    """
    Prompts growing 20 a turn (30, 50, ...): the wrap-up is the last prompt that fits (the next would pass the
    budget) or the last turn; only a budget the second prompt passes ends token_limit (no growth is known before).
    """
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 1)}
    limits = Limits(max_turns=turns, max_prompt_tokens=most, wrap_up=True)
    result = Agent(AnswersOnlyAtTheWrapUp([]), tools, limits=limits, estimator=_ten_a_message).run("Check.")
    assert_run_invariants(result, limits=limits)
    log = result.state.prompt_token_log
    if most < 30:  # not even the first wrap-up fits
        assert result.stop is Stop.TOKEN_LIMIT and log == []
    elif most < 50 and turns > 1:  # the first call is a normal one; the second prompt, wrap-up or not, passes
        assert result.stop is Stop.TOKEN_LIMIT and log == [30]
    else:
        assert (result.stop, result.code) == (Stop.ANSWERED, WRAP_UP) and log[-1] <= most
        assert result.state.turns == turns or log[-1] + 20 > most  # never earlier than needed


@pytest.mark.parametrize("budget, log", [(130, [30, 50]), (149, [30, 50]), (150, [30, 50, 70])])
def test_the_money_trigger_counts_the_growth_of_the_prompt(budget: int, log: list[int]):
    """
    One unit a prompt token, prompts 30, 50, 70: after 30 spent, a normal second call (50) and a wrap-up after it
    (70) need 150, so under 130 or 149 the second call is the wrap-up (twice 50 fitting must not let a normal call
    spend the last word's money); under 150 both fit and the third call is the wrap-up, not earlier.
    """
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 1)}
    chosen = Limits(max_turns=40, max_output_tokens=1, max_cost=Decimal(budget), wrap_up=True, repeated_results=None)
    price = Price(input=Decimal(1_000_000), output=Decimal(0))
    model = AnswersOnlyAtTheWrapUp([])
    result = Agent(model, tools, limits=chosen, prices=Prices(default=price), estimator=_ten_a_message).run("Check.")
    assert (result.stop, result.code) == (Stop.ANSWERED, WRAP_UP) and result.state.prompt_token_log == log
    assert model.offered[-1] == [] and result.usage.cost == sum(log)
    assert_run_invariants(result, limits=chosen)


@given(
    budget=st.integers(0, 600),
    per_input=st.integers(0, 3),
    per_output=st.integers(0, 3),
    cap=st.integers(1, 10),
    turns=st.integers(1, 40),
)
def test_a_growing_prompt_never_spends_the_money_the_wrap_up_needed(budget, per_input, per_output, cap, turns):
    """
    Prompts growing 20 a turn (30, 50, ...) under a money budget: once the growth is known (after the first call)
    a run never ends cost_limit after a normal call, though the wrap-up in its place (as large) would have fitted.
    """
    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, lambda account: 1)}
    chosen = Limits(
        max_turns=turns, max_output_tokens=cap, max_cost=Decimal(budget), wrap_up=True, repeated_results=None
    )
    price = Price(input=Decimal(per_input * 1_000_000), output=Decimal(per_output * 1_000_000))
    agent = Agent(
        AnswersOnlyAtTheWrapUp([]), tools, limits=chosen, prices=Prices(default=price), estimator=_ten_a_message
    )
    result = agent.run("Check.")
    assert_run_invariants(result, limits=chosen)
    log = result.state.prompt_token_log
    assert result.usage.cost <= budget
    if result.stop is Stop.COST_LIMIT:  # no call fitted, or the first did with no growth known yet
        assert len(log) <= 1, f"cost_limit after the normal prompts {log}"
    else:
        assert (result.stop, result.code) == (Stop.ANSWERED, WRAP_UP) and log[-1] == 30 + 20 * (len(log) - 1)


@given(
    budget=st.integers(1, 200),
    pace=st.integers(1, 10),
    driver=st.sampled_from(["sync", "async"]),
    drawn=limits(max_turns=(1000, 1000), max_prompt_tokens=(100_000, 100_000), max_tool_calls=None, wrap_up=True),
)
def test_the_time_trigger_makes_the_last_call_the_time_admits_the_wrap_up(budget, pace, driver, drawn):
    """
    Every lookup takes ``pace`` seconds of a ``budget`` on a ManualClock: a run whose first turn fits answers
    coded wrap_up, never ending time_limit; the wrap-up comes once less than two turns' time is left, not before.
    """
    clock = ManualClock(step=0.0)

    def balance(account: str) -> int:
        clock.advance(pace)
        return 1

    tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, balance)}
    chosen = attrs.evolve(drawn, max_seconds=float(budget), repeated_results=None)
    agent = Agent(AnswersOnlyAtTheWrapUp([]), tools, limits=chosen, clock=clock)
    result = _go(agent, driver)
    assert_run_invariants(result, limits=chosen)
    made = result.state.turns - 1  # normal turns, each spending pace
    if budget <= pace:
        assert result.stop is Stop.TIME_LIMIT and result.state.turns == 1
    else:
        assert (result.stop, result.code) == (Stop.ANSWERED, WRAP_UP)
        assert budget - made * pace < 2 * pace and (made == 1 or budget - (made - 1) * pace >= 2 * pace)


@pytest.mark.parametrize(
    "make, stop",
    [
        (lambda: _agent([LOOKUP, LOOKUP, LOOKUP])[0], Stop.STEP_LIMIT),
        (lambda: _costly([LOOKUP, LOOKUP, LOOKUP])[0], Stop.COST_LIMIT),
        (lambda: _slow([LOOKUP, LOOKUP], ManualClock())[0], Stop.TIME_LIMIT),
        (lambda: _growing([LOOKUP, LOOKUP, LOOKUP])[0], Stop.TOKEN_LIMIT),
    ],
)
def test_the_reason_of_a_stop_at_the_wrap_up_says_a_call_was_proposed_there(make, stop):
    """A budget's stop reached from WrappingUp says the last word was a call, not that the budget was spent."""
    result = make().run("Check.")
    assert result.stop is stop and result.state.path[-2] == "WrappingUp"
    assert result.reason is not None and result.reason.startswith(
        "the wrap-up call proposed a call instead of answering"
    )


def test_a_nested_run_reads_its_parents_clock():
    """An agent run as a tool of an agent on a ManualClock spends that clock: a 150 s lookup ends it time_limit."""
    clock = ManualClock(step=0.0)

    def slow(account: str) -> int:
        clock.advance(150.0)
        return 1

    inner_tools = {"balance": ToolSpec("Read a balance in cents.", {"account": str}, slow)}
    inner = Agent(InOrder([LOOKUP, answer_message("1 cent")]), inner_tools, name="inner")
    ask = tool_call_message("n", "inner", {"task": "Check ACME."})
    outer = Agent(
        InOrder([ask, answer_message("done")]),
        {"inner": inner.as_tool("Check a balance.")},
        limits=Limits(max_seconds=100.0),
        clock=clock,
    )
    result = outer.run("Check.")
    child = next(iter(result.state.children.values()))
    assert child.machine_state == "TimeLimit" and result.state.observations[0].kind == "error"


def test_the_kits_invariant_refuses_a_wrap_up_code_on_an_answer_given_in_the_runs_course():
    """A run coded wrap_up whose answer did not come from WrappingUp breaks stop_justified, even on its last turn."""
    agent, _ = _agent([LOOKUP, answer_message("12000 cents")])
    result = agent.run("Check the balance.")
    assert result.code == "answered"
    result.state.code = WRAP_UP  # what a driver that coded every last answer wrap_up would report
    with pytest.raises(InvariantViolation) as caught:
        assert_run_invariants(attrs.evolve(result, code=WRAP_UP), limits=Limits(max_turns=2, wrap_up=True))
    assert caught.value.invariant == "stop_justified"


def _ticking_tools(clock: ManualClock) -> dict[str, ToolSpec]:
    def balance(account: str) -> int:
        clock.advance(1.0)
        return 1

    return {"balance": ToolSpec("Read a balance in cents.", {"account": str}, balance)}


@given(data=st.data(), driver=st.sampled_from(["sync", "async"]))
def test_every_budget_with_wrap_up_keeps_the_invariants_under_random_scripts(data, driver):
    """
    Random scripts under drawn turns, prompt, money and time budgets (a lookup takes a second on a ManualClock),
    wrap-up on: every run keeps the kit's invariants, and a run that went through WrappingUp ended there.
    """
    clock = ManualClock()
    tools = _ticking_tools(clock)
    drawn = data.draw(
        limits(
            max_turns=(1, 6),
            max_prompt_tokens=(0, 1500),
            max_cost=(Decimal(0), Decimal("0.02")),
            max_seconds=(0.5, 6.0),
            wrap_up=True,
        )
    )
    model = data.draw(scripted_models(tools, max_size=6))
    agent = Agent(model, tools, limits=drawn, prices=data.draw(prices()), clock=clock)
    result = _go(agent, driver)
    assert_run_invariants(result, limits=drawn)
    path = result.state.path
    if "WrappingUp" in path:
        messages = result.state.messages
        last = max(i for i, m in enumerate(messages) if m.get("role") == "assistant")  # the wrap-up's reply
        assert path.index("WrappingUp") == len(path) - 2 and messages[last - 1]["content"] == WRAP_UP_NOTE
