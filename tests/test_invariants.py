"""check_run: each invariant holds for honest runs and fails for a record that breaks it."""

from __future__ import annotations

import attrs

from agent_fsm import (
    Limits,
    Observation,
    RunResult,
    ScriptedModel,
    Stop,
    allow_all,
    answer_message,
    check_run,
    run,
    tool_call_message,
)
from tests.warehouse import make_warehouse, ship_args


def shipped():
    """An honest run that ships once."""
    tools, effects = make_warehouse()
    model = ScriptedModel([tool_call_message("c1", "ship", ship_args()), answer_message("ok")])
    return run("t", model, tools, gate=allow_all), effects


def test_all_hold_for_an_honest_run():
    """Effects authorised, observations correlated, bounded, typed ending."""
    result, effects = shipped()
    assert check_run(result, effects, Limits()) == {
        "effects_authorized": True,
        "observations_correlated": True,
        "bounded": True,
        "typed_ending": True,
    }


def test_an_effect_without_an_ok_observation_is_unauthorised():
    """An effect-log entry that no successful call produced breaks effects_authorized."""
    result, effects = shipped()
    forged = effects + [{"sku": "NUT", "qty": 9, "city": "Elsewhere"}]
    assert check_run(result, forged, Limits())["effects_authorized"] is False


def test_a_tool_message_for_an_unproposed_id_breaks_correlation():
    """A tool message answering a call id nobody proposed is caught."""
    result, effects = shipped()
    result.state.messages.insert(3, {"role": "tool", "tool_call_id": "ghost", "content": "{}"})
    assert check_run(result, effects, Limits())["observations_correlated"] is False


def test_observations_and_tool_messages_must_agree():
    """An observation without its tool message breaks correlation."""
    result, effects = shipped()
    result.state.observations.append(Observation("c1", True, "result", {}))
    assert check_run(result, effects, Limits())["observations_correlated"] is False


def test_bounded_checks_turns_attempts_and_prompts():
    """Each budget is checked against the limits given."""
    result, effects = shipped()
    assert check_run(result, effects, Limits(max_turns=1))["bounded"] is False
    assert check_run(result, effects, Limits(max_tool_calls=0))["bounded"] is False
    assert check_run(result, effects, Limits(max_prompt_tokens=10))["bounded"] is False


def test_typed_ending_must_agree_with_the_machine_state():
    """A stop that contradicts the state the run rests in is not a typed ending."""
    result, effects = shipped()
    lying = attrs.evolve(result, stop=Stop.STEP_LIMIT)
    assert check_run(lying, effects, Limits())["typed_ending"] is False
    working = RunResult(Stop.ANSWERED, None, attrs.evolve(result.state, machine_state="Executing"))
    assert check_run(working, effects, Limits())["typed_ending"] is False


def test_an_effect_of_a_nested_run_is_authorised_by_the_nested_call() -> None:
    """An agent run as a tool executes its own calls: their effects are authorised by them, not by the parent's."""
    from agent_fsm import Agent

    tools, effects = make_warehouse()
    child_script = [tool_call_message("c1", "ship", ship_args()), answer_message("shipped")]
    shipper = Agent(ScriptedModel(child_script), tools, gate=allow_all, name="shipper")
    top = Agent(
        ScriptedModel([tool_call_message("t1", "shipper", {"task": "ship it"}), answer_message("done")]),
        {"shipper": shipper.as_tool()},
        gate=allow_all,
        name="desk",
    )
    result = top.run("t")
    assert len(effects) == 1 and result.state.children["t1"].observations[0].kind == "result"
    assert check_run(result, effects, Limits())["effects_authorized"]
    orphan = attrs.evolve(result, state=attrs.evolve(result.state, children={}))
    assert not check_run(orphan, effects, Limits())["effects_authorized"]
