"""A world's own endings: Ending from an answer check, endings= for the engine's stops, RunResult.code."""

import json

import pytest

from agent_fsm import (
    Ending,
    Limits,
    RunResult,
    RunState,
    ScriptedModel,
    Stop,
    ToolSpec,
    answer_message,
    resume,
    run,
    tool_call_message,
)
from agent_fsm.engine import ask_for_effects
from agent_fsm.testing import assert_run_invariants


def _tools():
    return {
        "look": ToolSpec("Look.", {"q": str}, lambda q: {"q": q}),
        "book": ToolSpec("Book.", {"slot": str}, lambda slot: {"slot": slot}, effectful=True),
    }


def test_an_ending_from_the_answer_check_refuses_with_its_code():
    """The answer is refused (answer_rejected), and the code says which world ending it was."""
    result = run(
        "q",
        ScriptedModel(turns=[answer_message("cites page 9")]),
        _tools(),
        answer_check=lambda text, state: Ending("unread_citation", "page 9 was never read"),
    )
    assert (result.stop, result.code, result.reason) == (
        Stop.ANSWER_REJECTED,
        "unread_citation",
        "page 9 was never read",
    )
    assert result.answer is None
    assert_run_invariants(result, [], Limits())


def test_an_accepting_ending_keeps_the_answer_and_names_its_kind():
    """accept=True: the run is answered, and the code says what kind of answer it was."""
    result = run(
        "q",
        ScriptedModel(turns=[answer_message("the manuals do not settle it")]),
        _tools(),
        answer_check=lambda text, state: Ending("missing_evidence", "no manual states it", accept=True),
    )
    assert (result.stop, result.code, result.answer) == (
        Stop.ANSWERED,
        "missing_evidence",
        "the manuals do not settle it",
    )


def test_the_code_is_the_stop_when_the_world_declared_nothing():
    """Always set: a plain run's code is its stop's value, including a plain string refusal."""
    plain = run("q", ScriptedModel(turns=[answer_message("hi")]), _tools())
    refused = run("q", ScriptedModel(turns=[answer_message("hi")]), _tools(), answer_check=lambda t, s: "no")
    assert (plain.code, refused.code) == ("answered", "answer_rejected")
    assert plain.state.code is None
    assert RunResult(Stop.TOOL_LIMIT, None, RunState()).code == "tool_limit"


def test_an_endings_table_names_the_code_of_an_engine_stop():
    """{Stop: code}: a step limit is the world's turn_limit; stops the table omits keep their value."""
    looping = ScriptedModel(
        turns=[tool_call_message("c", "look", {"q": "x"})], reactions={"q": tool_call_message("c", "look", {"q": "x"})}
    )
    result = run("q", looping, _tools(), limits=Limits(max_turns=2), endings={Stop.STEP_LIMIT: "turn_limit"})
    assert (result.stop, result.code) == (Stop.STEP_LIMIT, "turn_limit")
    other = run("q", ScriptedModel(turns=[answer_message("a")]), _tools(), endings={Stop.STEP_LIMIT: "turn_limit"})
    assert other.code == "answered"


def test_an_endings_function_reads_typed_state_not_prose():
    """(stop, state) -> code: a denial repeated is denied_action, told apart by the observation kind."""

    def endings(stop, state):
        if stop is Stop.NO_PROGRESS:
            return {"denied": "denied_action", "invalid": "invalid_action"}[state.observations[-1].kind]
        return None

    booking = tool_call_message("b", "book", {"slot": "mon"})
    result = run("q", ScriptedModel(turns=[booking], reactions={"denied": booking}), _tools(), endings=endings)
    assert (result.stop, result.code) == (Stop.NO_PROGRESS, "denied_action")


def test_the_code_survives_a_save_and_load():
    """The code is kept in RunState, so a saved finished run still says how it ended."""
    result = run(
        "q",
        ScriptedModel(turns=[answer_message("x")]),
        _tools(),
        answer_check=lambda t, s: Ending("duplicate_query", "searched twice"),
    )
    loaded = RunState.from_json(result.state.to_json())
    assert loaded == result.state
    assert loaded.code == "duplicate_query"


def test_a_saved_state_with_a_code_that_is_not_a_name_is_refused():
    """Saved state is data: a code that is not a lowercase identifier makes it malformed."""
    data = json.loads(RunState().to_json())
    data["code"] = "Answered; DROP TABLE"
    with pytest.raises(ValueError, match="malformed"):
        RunState.from_json(json.dumps(data))


def test_a_pause_carries_no_code_and_resume_sets_it():
    """awaiting_approval is not a world ending; the resumed run's ending is."""
    model = ScriptedModel(turns=[tool_call_message("b", "book", {"slot": "mon"}), answer_message("booked")])
    gate = ask_for_effects(_tools())
    paused = run("q", model, _tools(), gate=gate, endings={Stop.ANSWERED: "booked"})
    assert (paused.code, paused.state.code) == ("awaiting_approval", None)
    done = resume(paused.state, model, _tools(), approve=True, gate=gate, endings={Stop.ANSWERED: "booked"})
    assert (done.stop, done.code, done.state.code) == (Stop.ANSWERED, "booked", "booked")


@pytest.mark.parametrize("code", ["", "Unread", "unread citation", "x" * 65, 3])
def test_an_ending_code_must_be_a_name(code):
    """A code is a lowercase identifier; anything else is a programmer error, raised at once."""
    with pytest.raises(ValueError, match="lowercase identifier"):
        Ending(code, "why")


def test_an_endings_rule_naming_a_bad_code_is_loud():
    """A rule returning something that is not a code fails loudly rather than mislabelling the run."""
    with pytest.raises(ValueError, match="lowercase identifier"):
        run("q", ScriptedModel(turns=[answer_message("a")]), _tools(), endings=lambda stop, state: "Not A Code")


def test_the_sequence_diagram_names_the_worlds_code():
    """The ending note of a drawn run carries the code, read from the saved state."""
    from agent_fsm.diagrams.sequence import sequence_diagram

    result = run(
        "q",
        ScriptedModel(turns=[answer_message("cites page 9")]),
        _tools(),
        answer_check=lambda text, state: Ending("unread_citation", "page 9 was never read"),
    )
    drawn = sequence_diagram(RunState.from_json(result.state.to_json()))
    assert "stop: answer_rejected [unread_citation]" in drawn


def test_the_kit_refuses_a_result_whose_code_is_not_a_name_or_disagrees():
    """typed_ending: a code that is not an identifier, or that contradicts the state's record, is reported."""
    import attrs

    from agent_fsm.testing import InvariantViolation

    result = run(
        "q",
        ScriptedModel(turns=[answer_message("x")]),
        _tools(),
        answer_check=lambda t, s: Ending("unread_citation", "no"),
    )
    assert_run_invariants(result, [], Limits())
    for bad in ("Not A Code", "answer_rejected"):
        with pytest.raises(InvariantViolation, match="typed_ending"):
            assert_run_invariants(attrs.evolve(result, code=bad), [], Limits())
