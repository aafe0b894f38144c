"""A context that shrinks before it stops: the prompt kept apart from the transcript, compacted, checked, recorded."""

from __future__ import annotations

import asyncio
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
    Compacted,
    Limits,
    ModelReply,
    Price,
    Prices,
    PromptWindow,
    RunState,
    StandIn,
    Stop,
    ToolSpec,
    drop_middle,
    elide_results,
    estimate_tokens,
    event_from_json,
    event_to_json,
    summarize,
    tool_call_message,
)
from agent_fsm.engine import RunError, prompt_problem, protected
from agent_fsm.engine._state import state_problem
from agent_fsm.testing import compactors

SYSTEM = "You walk the archive."
TASK = "Open every box in the archive and report."


class Walker:
    """Opens box 1, 2, ... (``calls`` boxes per reply), then answers; keeps every prompt it was sent."""

    def __init__(self, boxes: int, calls: int = 1) -> None:
        self.boxes, self.calls, self.opened = boxes, calls, 0
        self.prompts: list[list[dict[str, Any]]] = []
        self.replies: list[dict[str, Any]] = []

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> dict[str, Any]:
        self.prompts.append([dict(m) for m in messages])
        if self.opened >= self.boxes:
            reply: dict[str, Any] = {"role": "assistant", "content": f"opened {self.opened} boxes"}
        else:
            n = min(self.calls, self.boxes - self.opened)
            calls = []
            for _ in range(n):
                self.opened += 1
                calls.append(tool_call_message(f"box{self.opened}", "open_box", {"box": self.opened})["tool_calls"][0])
            reply = {"role": "assistant", "content": None, "tool_calls": calls}
        self.replies.append(reply)
        return reply


def archive(size: int = 300) -> dict[str, ToolSpec]:
    """One tool: a box's contents, ``size`` characters of it."""
    return {"open_box": ToolSpec("Open a box.", {"box": int}, lambda box: f"box {box}: " + "paper " * (size // 6))}


def tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(estimate_tokens(m) for m in messages)


def test_a_plain_run_sends_its_transcript_and_records_no_compaction():
    """Without compact= the prompt is the transcript: nothing is kept apart, nothing recorded."""
    model = Walker(3)
    result = Agent(model, archive(), system_prompt=SYSTEM).run(TASK)
    assert result.stop is Stop.ANSWERED
    assert result.state.prompt is None and result.state.compactions == []
    assert model.prompts[-1] == result.state.messages[:-1]


def test_a_500_turn_wanderer_keeps_its_prompt_under_budget_and_its_transcript_whole():
    """drop_middle: 500 boxes opened under a 2000-token budget; every prompt fits, the transcript keeps everything."""
    model = Walker(500)
    limits = Limits(max_turns=501, max_prompt_tokens=2000)
    agent = Agent(model, archive(), system_prompt=SYSTEM, limits=limits, compact=drop_middle(keep=3), compact_at=1500)
    result = agent.run(TASK)
    state = result.state
    assert result.stop is Stop.ANSWERED and state.turns == 501
    assert max(state.prompt_token_log) <= 2000
    assert max(tokens(p) for p in model.prompts) <= 2000 - 0  # what was really sent, measured again
    # The transcript is whole: every reply the model gave, every result, in order.
    assert [m for m in state.messages if m["role"] == "assistant"] == model.replies
    assert len(state.observations) == 500 and all(o.kind == "result" for o in state.observations)
    assert len(state.messages) == 2 + 500 * 2 + 1
    # What the model no longer saw is on record, and nothing else is missing from the last prompt.
    dropped = {i for c in state.compactions for i in c.dropped}
    sent = {e for e in state.prompt or () if type(e) is int}
    assert dropped | sent == set(range(len(state.messages)))
    assert state_problem(state) is None
    assert RunState.from_json(state.to_json()) == state


def test_without_compaction_the_same_wanderer_stops_at_the_token_limit():
    """The control: the same walk with no compaction ends token_limit long before its 500 boxes."""
    result = Agent(Walker(500), archive(), limits=Limits(max_turns=501, max_prompt_tokens=2000)).run(TASK)
    assert result.stop is Stop.TOKEN_LIMIT and result.state.turns < 30


def test_elide_results_keeps_the_calls_and_the_last_results():
    """Older results are sent as stand-ins answering the same call; the transcript keeps their content."""
    model = Walker(12)
    agent = Agent(
        model,
        archive(600),
        limits=Limits(max_turns=20, max_prompt_tokens=1400),
        compact=elide_results(keep=2),
    )
    result = agent.run(TASK)
    assert result.stop is Stop.ANSWERED
    last = model.prompts[-1]
    results = [m for m in last if m["role"] == "tool"]
    elided = [m for m in results if "elided" in m["content"]]
    assert elided and all(json.loads(m["content"])["elided"] for m in elided)
    assert all("paper" in m["content"] for m in results[-2:])  # the last two as they were
    # Every call is still in the prompt, and each stand-in answers its own call id.
    assert sum(len(m.get("tool_calls") or ()) for m in last) == 12
    record = result.state.compactions[0]
    assert record.strategy == "elide_results(keep=2)" and record.elided and record.dropped == ()
    assert all("paper" in json.dumps(result.state.messages[i]) for i in record.elided)


class Summarizer:
    """Writes a summary; counts the calls and keeps the prompts it was sent."""

    def __init__(self, fail: bool = False) -> None:
        self.prompts: list[Sequence[Mapping[str, Any]]] = []
        self.fail = fail

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> dict[str, Any]:
        self.prompts.append(messages)
        if self.fail:
            raise ConnectionError("summarizer down")
        return {"role": "assistant", "content": f"opened boxes; {len(messages)} messages read"}


def test_summarize_is_a_model_call_charged_to_the_turn_and_token_budgets():
    """The summary spends a turn and logs its prompt size; it stands in for the middle it replaced."""
    model, writer = Walker(30), Summarizer()
    limits = Limits(max_turns=60, max_prompt_tokens=1500)
    agent = Agent(model, archive(), limits=limits, compact=summarize(writer, keep=2), compact_at=1200)
    result = agent.run(TASK)
    state = result.state
    assert result.stop is Stop.ANSWERED
    assert state.turns == len(model.prompts) + len(writer.prompts)  # each summary is a turn
    assert len(state.prompt_token_log) == state.turns and max(state.prompt_token_log) <= 1500
    assert all(tokens(p) <= 1500 for p in writer.prompts)
    summaries = [m for m in model.prompts[-1] if str(m.get("content")).startswith("Summary of the earlier part")]
    assert len(summaries) == 1
    assert all(c.strategy == "summarize(keep=2)" for c in state.compactions)


def test_a_summarizer_that_cannot_be_reached_ends_the_run_provider_error():
    """Never a made-up summary: a provider failure of the summary call ends the run provider_error."""
    agent = Agent(
        Walker(30),
        archive(),
        limits=Limits(max_turns=60, max_prompt_tokens=1500),
        compact=summarize(Summarizer(fail=True)),
        compact_at=1200,
    )
    result = agent.run(TASK)
    assert result.stop is Stop.PROVIDER_ERROR and "summarizer down" in (result.reason or "")
    assert result.state.path[-2:] == ["Compacting", "ProviderError"]


class PricedSummarizer(Summarizer):
    """A summarizer that goes by a model name and reports its own usage figures."""

    model = "writer"

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> Any:
        return ModelReply(super().chat(messages, tools), prompt_tokens=tokens(messages), output_tokens=40)


WALKER_PRICE = Price(input=Decimal("1"), output=Decimal("1"))
WRITER_PRICE = Price(input=Decimal("10000"), output=Decimal("10000"))


def test_a_summary_is_priced_and_added_to_usage():
    """Each summary is charged at its model's price (a Charged event for it), and usage adds up to the charges."""
    writer = PricedSummarizer()
    limits = Limits(max_turns=60, max_prompt_tokens=1500)
    prices = Prices({"writer": WRITER_PRICE}, default=WALKER_PRICE)
    agent = Agent(
        Walker(30), archive(), limits=limits, compact=summarize(writer, keep=2), compact_at=1200, prices=prices
    )
    events: list[Any] = []
    result = agent.run(TASK, on_event=events.append)
    charges = [e for e in events if isinstance(e, Charged)]
    written = [e for e in charges if e.model == "writer"]
    assert result.stop is Stop.ANSWERED and len(written) == len(writer.prompts) > 0
    assert all(e.output_tokens == 40 for e in written)
    assert result.usage.cost == sum(Decimal(e.cost) for e in charges)
    assert result.usage.input_tokens == sum(e.input_tokens for e in charges)
    assert result.usage.cost > sum(Decimal(e.cost) for e in charges if e.model != "writer")


def test_a_summary_that_could_pass_the_cost_budget_is_not_made():
    """Under max_cost a summary's worst case is checked before it is asked for: the budget is never passed."""
    writer = PricedSummarizer()
    limits = Limits(max_turns=60, max_prompt_tokens=1500, max_output_tokens=200, max_cost=Decimal("1"))
    prices = Prices({"writer": WRITER_PRICE}, default=WALKER_PRICE)
    agent = Agent(
        Walker(30), archive(), limits=limits, compact=summarize(writer, keep=2), compact_at=1200, prices=prices
    )
    result = agent.run(TASK)
    assert result.usage.cost <= Decimal("1")
    assert writer.prompts == []  # a summary's worst case (hundreds of tokens at 10,000 per million) is over
    assert result.state.compactions and not any(c.charged for c in result.state.compactions)


class CappedSummarizer(PricedSummarizer):
    """A summarizer that takes the output cap, and keeps the caps it was told."""

    takes_output_cap = True

    def __init__(self) -> None:
        super().__init__()
        self.caps: list[int] = []

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Any, max_output_tokens: int = -1) -> Any:
        self.caps.append(max_output_tokens)
        return super().chat(messages, tools)


def test_a_summarizer_that_takes_the_output_cap_is_told_it():
    """The worst case priced for a summary counts on the cap, so a summarizer that takes it is told it."""
    writer = CappedSummarizer()
    limits = Limits(max_turns=60, max_prompt_tokens=1500, max_output_tokens=150, max_cost=Decimal("100"))
    prices = Prices(default=WALKER_PRICE)
    agent = Agent(
        Walker(30), archive(), limits=limits, compact=summarize(writer, keep=2), compact_at=1200, prices=prices
    )
    assert agent.run(TASK).stop is Stop.ANSWERED
    assert writer.caps and set(writer.caps) == {150}


class HostileSummarizer(Summarizer):
    """A summarizer whose reply reports an output count that is not a count."""

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> Any:
        return ModelReply(super().chat(messages, tools), output_tokens=float("inf"))


def test_a_summary_reporting_a_hostile_figure_is_refused_and_the_state_saves():
    """An infinite output count from the summarizer: the run ends provider_error, nothing charged, the state saves."""
    limits = Limits(max_turns=60, max_prompt_tokens=1500)
    agent = Agent(Walker(30), archive(), limits=limits, compact=summarize(HostileSummarizer(), keep=2), compact_at=1200)
    result = agent.run(TASK)
    assert result.stop is Stop.PROVIDER_ERROR and "output_tokens" in (result.reason or "")
    assert result.state.fault is not None and result.state.fault.kind == "bad_response"
    assert not any(c.charged for c in result.state.compactions)
    assert RunState.from_json(result.state.to_json()) == result.state


def test_with_no_turn_left_the_middle_goes_without_a_summary():
    """A summary needs a turn: with the last turn to spend, the middle is dropped and the model asked."""
    model, writer = Walker(100), Summarizer()
    agent = Agent(
        model,
        archive(),
        limits=Limits(max_turns=6, max_prompt_tokens=900),
        compact=summarize(writer, keep=1),
        compact_at=700,
    )
    result = agent.run(TASK)
    assert result.stop is Stop.STEP_LIMIT
    assert result.state.turns == 6


def test_token_limit_only_when_compaction_cannot_fit():
    """A latest result too big for any prompt: the compaction is made, recorded, and the run ends token_limit."""
    huge = {"open_box": ToolSpec("Open a box.", {"box": int}, lambda box: "paper " * (800 if box == 4 else 20))}
    result = Agent(
        Walker(10), huge, limits=Limits(max_turns=20, max_prompt_tokens=1000), compact=drop_middle(keep=1)
    ).run(TASK)
    assert result.stop is Stop.TOKEN_LIMIT
    assert result.state.path[-2:] == ["Compacting", "TokenLimit"]
    assert result.state.compactions and result.state.compactions[-1].tokens_after > 1000


def test_a_user_compaction_is_applied_and_its_prompt_checked():
    """A function of the window may do its own; one that drops the task is a bug, reported with the run."""

    def keep_head_and_last(window: PromptWindow) -> list[Any]:
        turns = window.turns()
        return [*window.prompt[: window.opening], *window.prompt[turns[-1] :]]

    result = Agent(
        Walker(20), archive(), limits=Limits(max_turns=30, max_prompt_tokens=1200), compact=keep_head_and_last
    ).run(TASK)
    assert result.stop is Stop.ANSWERED and result.state.compactions[0].strategy.endswith("keep_head_and_last")

    def forgets_the_task(window: PromptWindow) -> list[Any]:
        return [e for e in window.prompt if e != window.opening - 1]

    with pytest.raises(RunError, match="is not sent as it is") as caught:
        Agent(Walker(20), archive(), limits=Limits(max_turns=30, max_prompt_tokens=1200), compact=forgets_the_task).run(
            TASK
        )
    assert caught.value.state is not None and caught.value.state.machine_state == "Compacting"


def test_an_async_compaction_runs_under_arun_and_the_event_says_what_changed():
    """arun awaits an async compaction; the Compacted event survives a JSON round trip."""
    inner = drop_middle(keep=2)

    async def compact(window: PromptWindow) -> Sequence[Any]:
        return inner(window)

    seen: list[Any] = []
    agent = Agent(Walker(20), archive(), limits=Limits(max_turns=30, max_prompt_tokens=1200), compact=compact)
    result = asyncio.run(agent.arun(TASK, on_event=seen.append))
    assert result.stop is Stop.ANSWERED
    events = [e for e in seen if isinstance(e, Compacted)]
    assert len(events) == len(result.state.compactions) > 0
    assert events[0].dropped == len(result.state.compactions[0].dropped)
    assert event_from_json(json.loads(json.dumps(event_to_json(events[0])))) == events[0]


def test_the_strict_reader_refuses_a_forged_prompt():
    """A saved prompt is data: an index outside the transcript, a dropped task, a wrong type are refused by path."""
    result = Agent(
        Walker(12), archive(), limits=Limits(max_turns=20, max_prompt_tokens=1200), compact=drop_middle(keep=1)
    ).run(TASK)
    data = json.loads(result.state.to_json())
    data["prompt"][-1] = 10_000
    with pytest.raises(ValueError, match="inconsistent at prompt"):
        RunState.from_json(json.dumps(data))
    data = json.loads(result.state.to_json())
    data["prompt"] = [e for e in data["prompt"] if e != data["opening"] - 1]
    with pytest.raises(ValueError, match="inconsistent at prompt: message 1"):
        RunState.from_json(json.dumps(data))
    data = json.loads(result.state.to_json())
    data["prompt"][0] = "0"
    with pytest.raises(ValueError, match="malformed at prompt.0"):
        RunState.from_json(json.dumps(data))
    data = json.loads(result.state.to_json())
    data["compactions"][0]["turn"] = -1
    with pytest.raises(ValueError, match="malformed at compactions.0.turn"):
        RunState.from_json(json.dumps(data))


def test_a_state_saved_before_compaction_existed_still_loads():
    """prompt and compactions are optional in a saved state: an older one loads with the transcript as prompt."""
    result = Agent(Walker(2), archive()).run(TASK)
    data = json.loads(result.state.to_json())
    del data["prompt"], data["compactions"]
    assert RunState.from_json(json.dumps(data)) == result.state


def test_a_run_stopped_inside_a_compaction_makes_it_again():
    """A state left in Compacting (a crash, a cancellation) goes back to Ready and compacts afresh."""
    calls = 0

    def once_broken(window: PromptWindow) -> Sequence[Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("flaky")
        return drop_middle(keep=1)(window)

    agent = Agent(Walker(12), archive(), limits=Limits(max_turns=20, max_prompt_tokens=1200), compact=once_broken)
    with pytest.raises(RunError) as caught:
        agent.run(TASK)
    state = caught.value.state
    assert state is not None and state.machine_state == "Compacting"
    result = agent.advance(state)
    assert result.stop is Stop.ANSWERED and calls >= 2


def test_compact_options_are_checked_when_the_agent_is_defined():
    """A compaction that is not callable, or a negative compact_at, is refused at once."""
    with pytest.raises(TypeError, match="compact"):
        Agent(Walker(1), archive(), compact="drop_middle")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="compact_at"):
        Agent(Walker(1), archive(), compact=drop_middle(), compact_at=-1)
    with pytest.raises(ValueError, match="keep"):
        drop_middle(keep=0)


# --- the property: compaction never drops the system prompt, the task, or what the next call needs ---


class RandomWalker(Walker):
    """Opens boxes several at a time, the number per reply drawn up front."""

    def __init__(self, per_reply: list[int]) -> None:
        super().__init__(sum(per_reply))
        self.per_reply = per_reply

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> dict[str, Any]:
        turn = len(self.replies)
        self.calls = self.per_reply[turn] if turn < len(self.per_reply) else 1
        return super().chat(messages, tools)


WRITER = Summarizer()


@settings(deadline=None, max_examples=60)
@given(
    per_reply=st.lists(st.integers(1, 3), min_size=3, max_size=25),
    sizes=st.lists(st.integers(150, 900), min_size=1, max_size=8),
    compact=compactors(summarizer=WRITER),
    budget=st.integers(900, 2000),
    early=st.one_of(st.none(), st.integers(300, 2000)),
)
def test_compaction_never_drops_the_system_prompt_the_task_or_an_observation_the_next_call_needs(
    per_reply: list[int], sizes: list[int], compact: Any, budget: int, early: int | None
) -> None:
    """Whatever the walk and the compaction: each prompt holds the system prompt, the task and the latest results."""
    tools = {
        "open_box": ToolSpec(
            "Open a box.", {"box": int}, lambda box: f"box {box}: " + "paper " * (sizes[box % len(sizes)] // 6)
        )
    }
    model = RandomWalker(per_reply)
    limits = Limits(max_turns=60, max_prompt_tokens=budget)
    result = Agent(model, tools, system_prompt=SYSTEM, limits=limits, compact=compact, compact_at=early).run(TASK)
    state = result.state
    for index, prompt in enumerate(model.prompts):
        assert prompt[0] == {"role": "system", "content": SYSTEM}
        assert {"role": "user", "content": TASK} in prompt
        if index:  # the previous reply and every result answering it, as they were
            previous = model.replies[index - 1]
            assert previous in prompt
            answers = {m["tool_call_id"]: m for m in prompt if m["role"] == "tool"}
            for call in previous.get("tool_calls") or ():
                assert "paper" in answers[call["id"]]["content"]
    # The transcript is whole whatever was sent.
    assert [m for m in state.messages if m["role"] == "assistant"] == model.replies
    assert len(state.observations) == sum(len(r.get("tool_calls") or ()) for r in model.replies)
    assert state_problem(state) is None
    if state.prompt is not None:
        assert prompt_problem(state.messages, state.prompt, state.opening) is None
        assert protected(state.messages, state.opening) <= {e for e in state.prompt if type(e) is int}
    assert max(state.prompt_token_log, default=0) <= budget
    assert RunState.from_json(state.to_json()) == state


def test_prompt_problem_refuses_a_stand_in_that_answers_no_shown_call():
    """The wire rule: a tool result whose call is not in the prompt is refused."""
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "t"},
        tool_call_message("c1", "open_box", {"box": 1}),
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
        {"role": "assistant", "content": "done"},
    ]
    stand_in = StandIn((3,), {"role": "tool", "tool_call_id": "c1", "content": "elided"})
    assert prompt_problem(messages, [0, 1, stand_in, 4], 2) == (
        "a tool result answers 'c1', a call the prompt does not show"
    )
    assert prompt_problem(messages, [0, 1, 2, stand_in, 4], 2) is None
    assert "out of order" in (prompt_problem(messages, [0, 1, 4, 2], 2) or "")


def test_the_viewer_and_the_trace_show_the_compactions():
    """The run page lists each compaction; the timeline numbers model calls past the summaries' own."""
    from agent_fsm.diagrams.path import turns_of
    from agent_fsm.web import render_view, timeline_of

    agent = Agent(
        Walker(30),
        archive(),
        limits=Limits(max_turns=60, max_prompt_tokens=1500),
        compact=summarize(Summarizer(), keep=2),
        compact_at=1200,
    )
    state = agent.run(TASK).state
    charged = [c for c in state.compactions if c.charged]
    assert charged and len(charged) == len(state.compactions)
    records = turns_of(state)
    assert len(records) + len(charged) == state.turns
    assert not {c.turn - 1 for c in charged} & {r.number for r in records}
    assert [r.prompt_tokens for r in records] == [
        state.prompt_token_log[r.number - 1] for r in records
    ]  # each reply beside its own prompt's size
    line = timeline_of(state)
    assert line.compactions == tuple(state.compactions)
    page = render_view(state)
    assert 'id="compactions"' in page and "summarize(keep=2)" in page and "(a model call)" in page


def test_a_plain_run_page_has_no_compaction_section():
    """Nothing is shown where nothing was compacted."""
    from agent_fsm.web import render_view

    assert 'id="compactions"' not in render_view(Agent(Walker(2), archive()).run(TASK).state)


def test_an_async_summarizer_is_awaited_under_arun_and_refused_under_run():
    """A summarizer with only achat works under arun; under run it is the caller's mistake, said so."""
    from agent_fsm import NotSynchronous

    class AsyncSummarizer:
        async def achat(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> dict[str, Any]:
            return {"role": "assistant", "content": "summary, awaited"}

    def agent() -> Agent:
        limits = Limits(max_turns=60, max_prompt_tokens=1500)
        return Agent(
            Walker(30), archive(), limits=limits, compact=summarize(AsyncSummarizer(), keep=2), compact_at=1200
        )

    result = asyncio.run(agent().arun(TASK))
    assert result.stop is Stop.ANSWERED and any(c.charged for c in result.state.compactions)
    with pytest.raises(NotSynchronous, match="summarizer"):
        agent().run(TASK)
