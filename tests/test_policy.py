"""Tests for agent_fsm.engine._policy: the decide(task, observations) adapter and its mapping onto the engine."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import Ending, Limits, RunError, Stop, ToolSpec, run
from agent_fsm.engine import DecisionPolicy, FinalDecision, observations_of, parse_tool_calls, string_fields
from agent_fsm.engine._policy import conversation_of, task_of

FINAL = FinalDecision("final", string_fields({"answer": 50, "citation": 20}, may_be_empty=("citation",)))


def _tools(log: list) -> dict[str, ToolSpec]:
    def lookup(key: str) -> str:
        log.append(key)
        return key.upper()

    return {"lookup": ToolSpec("Look a key up.", string_fields({"key": 10}), lookup)}


STRICT = Limits(max_turns=4, repeated_denials=1)


def _run(decide, limits=STRICT, log=None):
    log = [] if log is None else log
    policy = DecisionPolicy(decide, final=FINAL)
    return run("find abc", policy, _tools(log), limits=limits, answer_check=FINAL.check()), log


def _once(decision):
    """A policy that makes ``decision`` and then answers."""
    return lambda task, obs: decision if not obs else {"action": "final", "answer": "done", "citation": ""}


def test_tool_decision_becomes_a_validated_call_and_answer_ends_the_run():
    """A well-formed tool decision runs its tool; the final decision becomes the answer text."""

    def decide(task, observations):
        if not observations:
            return {"action": "lookup", "key": task.split()[-1]}
        return {"action": "final", "answer": observations[0]["result"], "citation": ""}

    result, log = _run(decide)
    assert result.stop is Stop.ANSWERED
    assert json.loads(result.answer) == {"answer": "ABC", "citation": ""}
    assert log == ["abc"]
    assert result.state.turns == 2 and result.state.tool_attempts == 1


@pytest.mark.parametrize(
    "decision, fragment",
    [
        ({"action": "shell", "command": "ls"}, "unknown tool: 'shell'"),
        ({"action": "lookup", "key": "abc", "extra": "x"}, "Additional properties"),
        ({"action": "lookup", "key": 7}, "is not of type 'string'"),
        ({"action": "lookup", "key": "k" * 11}, "is too long"),
        ({"action": "lookup", "key": "   "}, "does not match"),
        ({"action": "lookup"}, "'key' is a required property"),
        (["lookup", "abc"], "a decision must be an object, got list"),
        ({"key": "abc"}, "non-empty string 'action'"),
        ({"action": 3, "key": "abc"}, "non-empty string 'action'"),
        ({"action": "lookup", "key": {1, 2}}, "is not JSON data"),
        ({"action": "lookup", "key": float("nan")}, "is not JSON data"),
    ],
)
def test_bad_decisions_are_refused_invalid_before_dispatch(decision, fragment):
    """Unknown actions, extra fields, bad or oversized values never reach a handler; the run ends no_progress."""
    result, log = _run(lambda task, obs: decision)
    assert log == []
    assert result.stop is Stop.NO_PROGRESS
    assert result.state.tool_attempts == 0
    assert [o.kind for o in result.state.observations] == ["invalid"]
    assert fragment in result.state.observations[0].content


def test_policy_sees_its_refusal_and_may_correct_itself():
    """With repeated_denials above one, an invalid decision is an observation the policy can act on."""

    def decide(task, observations):
        if not observations:
            return {"action": "lookup", "key": "abc", "why": "extra"}
        if len(observations) == 1:
            assert observations[0]["kind"] == "invalid" and observations[0]["ok"] is False
            return {"action": "lookup", "key": "abc"}
        return {"action": "final", "answer": observations[-1]["result"], "citation": ""}

    result, log = _run(decide, limits=Limits(max_turns=4, repeated_denials=2))
    assert result.stop is Stop.ANSWERED
    assert log == ["abc"]
    assert [o.kind for o in result.state.observations] == ["invalid", "result"]


@pytest.mark.parametrize(
    "decision, fragment",
    [
        ({"action": "final", "answer": "x", "citation": "", "confidence": "high"}, "Additional properties"),
        ({"action": "final", "answer": "", "citation": ""}, "does not match"),
        ({"action": "final", "answer": "x" * 51, "citation": ""}, "is too long"),
        ({"action": "final", "answer": "x"}, "'citation' is a required property"),
    ],
)
def test_bad_final_decisions_end_answer_rejected(decision, fragment):
    """A final decision with the wrong shape is refused by the answer check."""
    result, _ = _run(lambda task, obs: decision)
    assert result.stop is Stop.ANSWER_REJECTED
    assert fragment in result.reason


def test_oserror_from_decide_is_a_provider_error():
    """A policy that cannot reach its model ends provider_error, with no answer."""

    def decide(task, observations):
        raise TimeoutError("model took too long")

    result, _ = _run(decide)
    assert result.stop is Stop.PROVIDER_ERROR
    assert result.answer is None and result.reason == "model took too long"


def test_a_bug_in_decide_propagates():
    """Any other exception from decide is a programmer error and fails loudly."""

    def decide(task, observations):
        raise ZeroDivisionError("oops")

    with pytest.raises(RunError, match="ZeroDivisionError"):
        _run(decide)


def test_observations_cover_only_the_current_task():
    """Observations start after the newest user message; earlier turns are conversation."""
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "first"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "function": {"name": "lookup", "arguments": '{"key": "x"}'}}],
        },
        {"role": "tool", "tool_call_id": "a", "content": json.dumps({"ok": True, "kind": "result", "content": "X"})},
        {"role": "assistant", "content": "the answer was X"},
        {"role": "user", "content": "second"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "b", "function": {"name": "lookup", "arguments": '{"key": "y"}'}}],
        },
        {"role": "tool", "tool_call_id": "b", "content": "not json"},
    ]
    assert task_of(messages) == "second"
    assert observations_of(messages) == [
        {
            "call_id": "b",
            "action": "lookup",
            "arguments": {"key": "y"},
            "ok": False,
            "kind": "error",
            "result": "not json",
        }
    ]
    assert conversation_of(messages) == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "the answer was X"},
    ]


def test_conversation_keyword_is_passed_only_when_asked_for():
    """With conversation=True decide receives the earlier user and assistant turns."""
    seen = []

    def decide(task, observations, conversation):
        seen.append(conversation)
        return {"action": "final", "answer": "ok", "citation": ""}

    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    result = run("again", DecisionPolicy(decide, final=FINAL, conversation=True), {}, history=history)
    assert result.stop is Stop.ANSWERED
    assert seen == [history]


def test_decide_must_be_callable():
    """A non-callable decide is refused when the policy is built."""
    with pytest.raises(TypeError, match="decide must be callable"):
        DecisionPolicy("search")  # type: ignore[arg-type]


@given(
    st.dictionaries(
        st.text(max_size=8).filter(lambda key: key != "action"),
        st.one_of(st.text(max_size=60), st.integers(), st.none()),
        max_size=4,
    )
)
def test_any_decision_dict_yields_a_parsable_wire_message(fields):
    """Whatever decide returns, the adapter produces a wire message the engine can parse without raising."""
    policy = DecisionPolicy(lambda t, o: fields, final=FINAL)
    message = policy.to_message({"action": "lookup", **fields}, "d1")
    calls = parse_tool_calls(message)
    assert len(calls) == 1 and calls[0].name == "lookup"
    final = policy.to_message({"action": "final", **fields}, "d1")
    assert "tool_calls" not in final
    assert json.loads(final["content"]) == fields


_VALUES = st.one_of(st.text(max_size=14), st.integers(), st.none(), st.booleans(), st.lists(st.integers(), max_size=2))
_DECISIONS = st.one_of(
    st.fixed_dictionaries({"action": st.sampled_from(["lookup", "final", "shell", ""])}).flatmap(
        lambda head: st.dictionaries(st.sampled_from(["key", "answer", "citation", "extra"]), _VALUES, max_size=3).map(
            lambda rest: {**rest, **head}
        )
    ),
    _VALUES,
)


@given(st.lists(_DECISIONS, min_size=1, max_size=6))
def test_any_decision_sequence_ends_typed_and_handlers_see_only_valid_arguments(decisions):
    """Whatever a policy decides, the run ends in a typed stop and the handler only receives valid keys."""
    turn = iter(decisions)
    log: list = []
    result, _ = _run(lambda task, obs: next(turn, {"action": "final", "answer": "end", "citation": ""}), log=log)
    assert isinstance(result.stop, Stop)
    assert all(isinstance(key, str) and len(key.strip()) > 0 and len(key) <= 10 for key in log)
    assert result.state.tool_attempts == len(log)
    if result.stop is Stop.ANSWERED:
        fields, reason = FINAL.read(result.answer)
        assert reason is None and set(fields) == {"answer", "citation"}


@pytest.mark.parametrize(
    "error",
    [json.JSONDecodeError("Expecting value", "{not json", 0), KeyError("action"), TypeError("unhashable type")],
)
def test_a_bad_decision_raised_by_decide_is_an_invalid_observation(error):
    """ValueError/TypeError/KeyError from decide (a model reply that will not parse) is refused, not a crash."""

    def decide(task, observations):
        raise error

    result, log = _run(decide)
    assert result.stop is Stop.NO_PROGRESS  # repeated_denials=1 in STRICT: the first bad decision ends the run
    assert [o.kind for o in result.state.observations] == ["invalid"]
    assert type(error).__name__ in result.state.observations[0].content
    assert log == [] and result.state.tool_attempts == 0


def test_a_raised_bad_decision_leaves_room_to_recover():
    """Counted by the no-progress rule like any refused decision: a policy may correct itself."""
    calls = []

    def decide(task, observations):
        calls.append(len(observations))
        if not observations:
            raise ValueError("the model's reply was not JSON")
        return {"action": "final", "answer": "fixed", "citation": ""}

    result, _ = _run(decide, limits=Limits(max_turns=4, repeated_denials=2))
    assert result.stop is Stop.ANSWERED and calls == [0, 1]
    assert result.state.observations[0].kind == "invalid"


@pytest.mark.parametrize("error", [AttributeError("no attribute 'x'"), AssertionError("unreachable"), NameError("y")])
def test_programmer_errors_in_decide_stay_loud(error):
    """Outside DECISION_ERRORS and OSError, an exception is a bug in the policy: RunError, state attached."""

    def decide(task, observations):
        raise error

    with pytest.raises(RunError, match=type(error).__name__) as caught:
        _run(decide)
    assert caught.value.state is not None and caught.value.state.turns == 1


def test_decide_may_stop_with_a_declared_ending():
    """An Ending from decide stops the run answer_rejected with the world's code; an undeclared one is a bug."""
    final = FinalDecision("final", FINAL.schema, endings=("no_match",))
    policy = DecisionPolicy(lambda task, obs: Ending("no_match", "nothing matched abc"), final=final)
    result = run("find abc", policy, _tools([]), limits=STRICT, answer_check=final.check())
    assert (result.stop, result.code, result.reason) == (Stop.ANSWER_REJECTED, "no_match", "nothing matched abc")
    rogue = DecisionPolicy(lambda task, obs: Ending("made_up", "?"), final=final)
    with pytest.raises(RunError, match="not a declared ending"):
        run("find abc", rogue, _tools([]), limits=STRICT, answer_check=final.check())


def test_an_undeclared_ending_in_answer_text_is_just_a_malformed_decision():
    """Text shaped like an ending but naming a code the world never declared gets no code."""
    final = FinalDecision("final", FINAL.schema, endings=("no_match",))
    fields = {"action": "final", "ending": "answered_ok", "reason": "trust me"}
    policy = DecisionPolicy(lambda task, obs: fields, final=final)
    result = run("find abc", policy, _tools([]), limits=STRICT, answer_check=final.check())
    assert (result.stop, result.code) == (Stop.ANSWER_REJECTED, "answer_rejected")
