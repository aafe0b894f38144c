"""
The run loop's options, checked: calls run together as if one by one, an answer held until accepted, a rate kept.

* :func:`check_parallel_calls` runs your tools under random scripts twice,
  one call at a time and with ``parallel_calls=True``, and requires the same
  run (:func:`assert_same_run`): tools whose calls may not overlap show here;
* :func:`assert_answer_held` reads the events of ``stream(..., hold_answer=True)``:
  no text of an answer the run did not accept was released;
* :func:`assert_rate_kept` reads the moments calls were made under a
  :class:`~agent_fsm.RateLimit`: no window held more than the bucket allows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
from hypothesis import settings as Settings
from hypothesis import strategies as st

from agent_fsm import Agent, AnswerWithheld, ModelReplied, RateLimit, ScriptedModel, StateEntered, TextDelta
from agent_fsm.engine import DEFAULT_LAST_WORD, Gate, Limits, Registry, RunEvent, RunState
from agent_fsm.testing._checks import _limits_strategy
from agent_fsm.testing._drive import DEFAULT_TASK
from agent_fsm.testing._invariants import InvariantViolation
from agent_fsm.testing._search import run_property
from agent_fsm.testing._strategies import assistant_messages, tool_arguments
from agent_fsm.testing._strategies import gates as gate_tables
from agent_fsm.testing._strategies import limits as limit_ranges

__all__ = [
    "assert_answer_held",
    "assert_rate_kept",
    "assert_same_run",
    "check_parallel_calls",
    "most_in_window",
    "parallel_call_messages",
]

_TIMING = ("elapsed", "run_id", "nonce")  # what two runs of the same script may differ in


def assert_same_run(one_by_one: RunState, together: RunState) -> None:
    """
    Raise :class:`InvariantViolation` unless the two states agree in everything but timing (and their ids).

    Raises:
        InvariantViolation: ``parallel_equals_sequential``, naming the first field that differs.
    """
    first, second = attrs.asdict(one_by_one), attrs.asdict(together)
    for name, value in first.items():
        if name not in _TIMING and second[name] != value:
            raise InvariantViolation(
                "parallel_equals_sequential", f"one by one {value!r}, together {second[name]!r}", where=name
            )


def check_parallel_calls(
    tools_factory: Callable[[], Any],
    *,
    gate: Gate | None = None,
    limits: Limits | st.SearchStrategy[Limits] | None = None,
    settings: Settings | None = None,
) -> None:
    """
    Check that your tools' calls may run together: random scripts, run one by one and with ``parallel_calls=True``.

    ``tools_factory`` makes a fresh registry (and world) for each run; with
    no ``gate`` given, gates are drawn that allow or deny each tool. Replies
    propose several calls at once. A tool whose effect-free calls depend on
    the order they run in (it counts, or reads what another changed without
    saying so with ``effectful=True``) fails the check.

    Raises:
        InvariantViolation: ``parallel_equals_sequential``: the first difference between the two runs.
    """
    tools = tools_factory()
    # Replies proposing several valid calls at once are what is checked: drawn often, beside every other kind.
    replies = st.one_of(parallel_call_messages(tools), assistant_messages(tools))
    # a random script may end on a call: its closing answer is the default last word, as in the kit's other models
    models = st.lists(replies, min_size=1, max_size=4).map(
        lambda turns: ScriptedModel(turns, last_word=DEFAULT_LAST_WORD)
    )
    limit_strategy = _limits_strategy(limits if limits is not None else limit_ranges())
    gate_strategy = st.just(gate) if gate is not None else gate_tables(tools, decisions=("allow", "deny"))

    def property_(data: st.DataObject) -> None:
        model = data.draw(models, label="model")
        chosen = data.draw(limit_strategy, label="limits")
        chosen_gate = data.draw(gate_strategy, label="gate")
        one_by_one, together = (
            Agent(model, tools_factory(), gate=chosen_gate, limits=chosen, parallel_calls=p).run(DEFAULT_TASK)
            for p in (False, True)
        )
        assert_same_run(one_by_one.state, together.state)

    run_property(property_, settings)


def parallel_call_messages(tools: Registry) -> st.SearchStrategy[dict[str, Any]]:
    """Assistant messages proposing two to four valid calls of ``tools`` at once (what parallel calls run)."""
    return _together(tools)


@st.composite
def _together(draw: st.DrawFn, tools: Registry) -> dict[str, Any]:
    calls = []
    for index in range(draw(st.integers(2, 4))):
        name = draw(st.sampled_from(sorted(tools)))
        arguments = json.dumps(draw(tool_arguments(tools, name)))
        calls.append({"id": f"p{index}", "type": "function", "function": {"name": name, "arguments": arguments}})
    return {"role": "assistant", "content": None, "tool_calls": calls}


def assert_answer_held(events: Sequence[RunEvent]) -> None:
    """
    Raise :class:`InvariantViolation` if ``events`` (of ``stream(..., hold_answer=True)``) released rejected text.

    For each model call of the run that streamed: if its reply proposed no
    calls, its text went out only when the run went on into ``Answered``;
    otherwise (an :class:`~agent_fsm.AnswerWithheld` names it) none of its
    text went out, and its ``ModelReplied`` carries none.

    Raises:
        InvariantViolation: ``answer_held``, naming the model call.
    """
    if not events:
        return
    run_id = events[0].run_id
    own = [e for e in events if e.run_id == run_id]
    withheld = {e.turn for e in own if isinstance(e, AnswerWithheld)}
    answered = [e.turn for e in own if isinstance(e, StateEntered) and e.state == "Answered"]
    for event in own:
        turn = getattr(event, "turn", None)
        if isinstance(event, TextDelta) and turn in withheld:
            _held_fail(turn, f"its text {event.text!r} was released, then the answer was withheld")
        if isinstance(event, ModelReplied) and turn in withheld and event.text is not None:
            _held_fail(turn, "its ModelReplied carried the withheld text")
        if isinstance(event, ModelReplied) and event.calls == 0 and turn not in withheld and turn not in answered:
            _held_fail(turn, "an answer that was neither accepted nor withheld")
    for index, event in enumerate(own):
        if isinstance(event, TextDelta) and event.turn in answered:
            later = own[index:]
            if not any(isinstance(e, StateEntered) and e.state == "Answered" for e in later):
                _held_fail(event.turn, "its text went out after the run entered Answered, or without it")


def _held_fail(turn: Any, detail: str) -> None:
    raise InvariantViolation("answer_held", detail, where=f"model call {turn}")


def most_in_window(moments: Iterable[float], seconds: float) -> int:
    """The most of ``moments`` (seconds on one clock) that fall within any ``seconds`` long window."""
    times = sorted(moments)
    most = first = 0
    for last, at in enumerate(times):
        while at - times[first] > seconds:
            first += 1
        most = max(most, last - first + 1)
    return most


def assert_rate_kept(moments: Iterable[float], limit: RateLimit, *, window: float = 1.0, jitter: float = 0.0) -> None:
    """
    Raise :class:`InvariantViolation` if more calls fell in some ``window`` than ``limit``'s requests allow.

    ``moments`` are when the calls were made (or seen: a server's arrival
    times, with ``jitter`` seconds allowed for the network and the loop).
    The bound is the burst plus the rate over ``window + jitter``.

    Raises:
        InvariantViolation: ``rate_kept``, with the count and the bound.
    """
    per_minute = limit.requests_per_minute
    if per_minute is None:
        return
    burst = limit.burst if limit.burst is not None else max(1.0, per_minute / 60.0)
    bound = burst + per_minute / 60.0 * (window + jitter)
    seen = most_in_window(moments, window)
    if seen > bound:
        raise InvariantViolation("rate_kept", f"{seen} calls within {window} s; at most {bound:g} allowed")
