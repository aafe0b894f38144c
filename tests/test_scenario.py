"""Scenario specs: loading with typed errors, running with resumes, judging expectations."""

from __future__ import annotations

import copy
import json
import textwrap
import tomllib
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import AgentFSMError, Limits, ScriptedModel, Stop, answer_message
from agent_fsm.scenarios import (
    Expectation,
    SpecFormatError,
    build_agent,
    build_model,
    discover,
    load_environment,
    load_scenario,
    run_scenario,
    scenario_from_data,
)

REPO = Path(__file__).resolve().parents[1]

HAPPY = """
name = "desk/happy"
description = "Look up, refund what was paid, answer."
environment = "agent_fsm.examples.support_desk:environment"
task = "My order A-17 came broken. Could you sort this out?"
gate = "refund"

[model]
turns = [
  { call = { id = "call_1", name = "lookup_order", arguments = { order_id = "A-17" } } },
  { call = { id = "call_2", name = "refund_order", arguments = { order_id = "A-17", amount_cents = 4999 } } },
  { answer = "Refunded 4999 cents." },
]

[expect]
stop = "answered"
answer_contains = ["4999"]
effects = [ { order_id = "A-17", refunded_cents = 4999 } ]
turns = 3
tool_attempts = 2
observation_kinds = ["result", "result"]
checks = { refund_verified = true }
"""


def _write(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _error(tmp_path: Path, text: str) -> SpecFormatError:
    path = _write(tmp_path, text)
    with pytest.raises(SpecFormatError) as info:
        run_scenario(load_scenario(path))
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    return info.value


# --- loading ---------------------------------------------------------------------


def test_load_reads_every_field(tmp_path: Path) -> None:
    """A complete spec loads into a Scenario with wire-format turns and typed limits."""
    text = HAPPY.replace(
        'gate = "refund"', 'gate = "refund"\nhistory = [ { role = "user", content = "hi" } ]\n\n[limits]\nmax_turns = 5'
    )
    scenario = load_scenario(_write(tmp_path, text))
    assert scenario.name == "desk/happy"
    assert scenario.limits == Limits(max_turns=5)
    assert scenario.history == ({"role": "user", "content": "hi"},)
    first = scenario.model.turns[0]
    assert first["tool_calls"][0]["function"] == {"name": "lookup_order", "arguments": '{"order_id": "A-17"}'}
    assert scenario.model.turns[2] == {"role": "assistant", "content": "Refunded 4999 cents."}
    assert scenario.expect["stop"] is Stop.ANSWERED


def test_error_is_typed_and_catchable_as_value_error(tmp_path: Path) -> None:
    """SpecFormatError is an AgentFSMError and a ValueError, and carries the key."""
    error = _error(tmp_path, HAPPY.replace('stop = "answered"', 'stop = "finished"'))
    assert isinstance(error, AgentFSMError) and isinstance(error, ValueError)
    assert error.key == "expect.stop"
    assert "'finished' is not a typed ending" in str(error)


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        (('task = "My order', 'tusk = "My order'), "tusk", "unknown key"),
        (('environment = "agent_fsm.examples.support_desk:environment"\n', ""), "environment", "missing"),
        (("turns = 3", "turns = true"), "expect.turns", "got a boolean"),
        (("turns = 3", 'turns = "3"'), "expect.turns", "expected an integer"),
        (
            ('{ answer = "Refunded 4999 cents." }', '{ answer = "x", call = { id = "c", name = "n" } }'),
            "model.turns[2]",
            "exactly one of",
        ),
        (('{ id = "call_1", name', "{ name"), "model.turns[0].call.id", "missing"),
        (
            ('arguments = { order_id = "A-17" } }', 'arguments = { order_id = "A-17" }, raw_arguments = "{}" }'),
            "model.turns[0].call.raw_arguments",
            "not both",
        ),
        (
            ('observation_kinds = ["result", "result"]', 'observation_kinds = ["result", "okay"]'),
            "expect.observation_kinds[1]",
            "not an observation kind",
        ),
        (
            ("checks = { refund_verified = true }", 'checks = { refund_verified = "yes" }'),
            "expect.checks.refund_verified",
            "true or false",
        ),
        (
            ('environment = "agent_fsm.examples.support_desk:environment"', 'environment = "os:system"'),
            "environment",
            "outside the allowed packages",
        ),
        (
            ('environment = "agent_fsm.examples.support_desk:environment"', 'environment = "import os"'),
            "environment",
            "package.module:function",
        ),
        (
            (
                'environment = "agent_fsm.examples.support_desk:environment"',
                'environment = "agent_fsm.examples.support_desk:nothing"',
            ),
            "environment",
            "has no function",
        ),
        (
            (
                'environment = "agent_fsm.examples.support_desk:environment"',
                'environment = "agent_fsm.examples.support_desk:make_support_desk"',
            ),
            "environment",
            "expected an agent_fsm Environment",
        ),
        (('gate = "refund"', 'gate = "open_sesame"'), "gate", "not a gate of this environment"),
        (("checks = { refund_verified = true }", "checks = { paid = true }"), "expect.checks.paid", "not a check"),
        (('stop = "answered"\n', ""), "expect.stop", "missing"),
    ],
)
def test_errors_name_the_offending_key(tmp_path: Path, change: tuple[str, str], key: str, words: str) -> None:
    """Each malformed spec raises SpecFormatError naming the file and the exact key."""
    assert change[0] in HAPPY
    error = _error(tmp_path, HAPPY.replace(change[0], change[1], 1))
    assert error.key == key
    assert words in error.problem


def test_limits_errors_name_the_limit(tmp_path: Path) -> None:
    """An unknown or invalid limit names limits.<field>."""
    unknown = _error(tmp_path, HAPPY + "\n[limits]\nmax_turnz = 3\n")
    assert unknown.key == "limits.max_turnz"
    negative = _error(tmp_path, HAPPY + "\n[limits]\nmax_turns = -1\n")
    assert negative.key == "limits.max_turns"


def test_named_model_must_exist(tmp_path: Path) -> None:
    """A model name that the environment lacks is reported under model.name with the known names."""
    text = HAPPY.split("[model]")[0] + '[model]\nname = "oracle"\n\n[expect]\nstop = "answered"\n'
    error = _error(tmp_path, text)
    assert error.key == "model.name"
    assert "stubborn" in error.problem


def test_named_model_takes_no_script(tmp_path: Path) -> None:
    """Both name and turns in [model] is refused."""
    error = _error(tmp_path, HAPPY.replace("[model]\n", '[model]\nname = "stubborn"\n'))
    assert error.key == "model.name"


def test_missing_and_broken_files(tmp_path: Path) -> None:
    """A missing file and invalid TOML are format errors for the whole file (key None)."""
    with pytest.raises(SpecFormatError, match="no such spec file") as missing:
        load_scenario(tmp_path / "absent.toml")
    assert missing.value.key is None
    with pytest.raises(SpecFormatError, match="not valid TOML"):
        load_scenario(_write(tmp_path, "task = [unclosed"))


def test_default_name_is_the_path_under_specs(tmp_path: Path) -> None:
    """Without a name, a spec is called by its path under the specs directory."""
    folder = tmp_path / "specs" / "desk"
    folder.mkdir(parents=True)
    path = _write(folder, HAPPY.replace('name = "desk/happy"\n', ""), "overreach.toml")
    assert load_scenario(path).name == "desk/overreach"


def test_load_environment_allowlist_can_be_widened() -> None:
    """Another package can be allowed explicitly; the default refuses it."""
    with pytest.raises(SpecFormatError, match="outside the allowed"):
        load_environment("agent_fsm.diagrams.catalog:machines")
    with pytest.raises(SpecFormatError, match="expected an agent_fsm Environment"):
        load_environment("agent_fsm.diagrams.catalog:machines", allowed=("agent_fsm.diagrams",))


def test_raw_arguments_are_sent_verbatim(tmp_path: Path) -> None:
    """raw_arguments reach the engine as written, and broken JSON becomes an invalid observation."""
    text = HAPPY.replace('arguments = { order_id = "A-17" } }', 'raw_arguments = "{not json" }')
    scenario = load_scenario(_write(tmp_path, text))
    assert scenario.model.turns[0]["tool_calls"][0]["function"]["arguments"] == "{not json"
    outcome = run_scenario(scenario)
    assert outcome.result.state.observations[0].kind == "invalid"


# --- running and judging -----------------------------------------------------------


def test_run_passes_and_lists_each_expectation(tmp_path: Path) -> None:
    """A spec that holds passes, with one held expectation per claim and the four invariants."""
    outcome = run_scenario(load_scenario(_write(tmp_path, HAPPY)))
    assert outcome.passed
    names = [e.name for e in outcome.expectations]
    assert names == [
        "stop",
        "answer contains '4999'",
        "effects",
        "turns",
        "tool_attempts",
        "observation_kinds",
        "check refund_verified",
    ]
    assert all(e.held for e in outcome.expectations)
    assert [e.name for e in outcome.invariants] == [
        "effects_authorized",
        "observations_correlated",
        "bounded",
        "typed_ending",
    ]
    assert outcome.effects == [{"order_id": "A-17", "refunded_cents": 4999}]


def test_failed_expectations_report_expected_and_actual(tmp_path: Path) -> None:
    """Wrong claims fail, each with what was expected and what came; the others still hold."""
    text = HAPPY.replace("turns = 3", "turns = 7").replace('answer_contains = ["4999"]', 'answer_contains = ["9999"]')
    outcome = run_scenario(load_scenario(_write(tmp_path, text)))
    assert not outcome.passed
    failed = {e.name: e for e in outcome.failures}
    assert set(failed) == {"turns", "answer contains '9999'"}
    assert (failed["turns"].expected, failed["turns"].actual) == (7, 3)
    report = outcome.report()
    assert "FAILED  turns: expected 7, got 3" in report
    assert "ok      stop: answered" in report
    assert report.startswith("scenario desk/happy: FAILED")


def test_secure_default_without_gate(tmp_path: Path) -> None:
    """Omitting gate runs effect-free tools and denies the refund."""
    text = HAPPY.replace('gate = "refund"\n', "")
    outcome = run_scenario(load_scenario(_write(tmp_path, text)))
    assert [o.kind for o in outcome.result.state.observations] == ["result", "denied"]
    assert outcome.effects == []
    assert not outcome.passed


def test_resume_decisions_are_applied_in_order(tmp_path: Path) -> None:
    """An ask gate pauses the run; [[resume]] approve=true lets the 9999 refund through."""
    text = (
        HAPPY.replace('gate = "refund"', 'gate = "manager"')
        .replace("amount_cents = 4999 }", "amount_cents = 9999 }", 1)
        .replace("refunded_cents = 4999", "refunded_cents = 9999")
        .replace("refund_verified = true", "within_authority = false")
        + '\n[[resume]]\napprove = true\nreason = "manager approved"\n'
    )
    outcome = run_scenario(load_scenario(_write(tmp_path, text)))
    assert outcome.passed, outcome.report()
    assert outcome.result.stop is Stop.ANSWERED


def test_unused_resume_is_a_failure(tmp_path: Path) -> None:
    """A [[resume]] the run never needed is reported, so a spec cannot claim a review that did not happen."""
    outcome = run_scenario(load_scenario(_write(tmp_path, HAPPY + "\n[[resume]]\napprove = true\n")))
    assert [e.name for e in outcome.failures] == ["resume decisions used"]


def test_unresumed_pause_ends_awaiting_approval(tmp_path: Path) -> None:
    """Without a decision the paused run is reported as awaiting_approval."""
    text = HAPPY.replace('gate = "refund"', 'gate = "ask_for_effects"').replace(
        'stop = "answered"', 'stop = "awaiting_approval"'
    )
    outcome = run_scenario(load_scenario(_write(tmp_path, text)))
    assert outcome.result.stop is Stop.AWAITING_APPROVAL
    assert outcome.expectations[0].held


def test_invariants_false_makes_them_advisory(tmp_path: Path) -> None:
    """With invariants = false a failed invariant is shown but does not fail the spec."""
    broken = (Expectation("bounded", True, False, False),)
    required = attrs.evolve(run_scenario(load_scenario(_write(tmp_path, HAPPY))), invariants=broken)
    assert not required.passed
    assert [e.name for e in required.failures] == ["bounded"]
    text = HAPPY.replace('stop = "answered"', 'stop = "answered"\ninvariants = false')
    advisory = attrs.evolve(run_scenario(load_scenario(_write(tmp_path, text))), invariants=broken)
    assert advisory.passed
    assert "FAILED  invariant bounded (not required)" in advisory.report()


def test_model_override_replaces_the_script(tmp_path: Path) -> None:
    """run_scenario(model=...) runs the same world and expectations against another model."""
    scenario = load_scenario(_write(tmp_path, HAPPY))
    outcome = run_scenario(scenario, model=ScriptedModel([answer_message("done")]))
    assert outcome.result.answer == "done"
    assert not outcome.passed


def test_trace_data_is_json_with_the_state(tmp_path: Path) -> None:
    """to_data() holds the spec name, the RunState as JSON data, effects and expectations."""
    outcome = run_scenario(load_scenario(_write(tmp_path, HAPPY)))
    data = json.loads(json.dumps(outcome.to_data()))
    assert data["spec"] == "desk/happy"
    assert data["state"] == json.loads(outcome.result.state.to_json())
    assert data["effects"] == [{"order_id": "A-17", "refunded_cents": 4999}]
    assert data["expectations"][0] == {"name": "stop", "expected": "answered", "actual": "answered", "held": True}


def test_build_model_gives_a_fresh_named_model() -> None:
    """Each call builds a new model, so specs never share a model's state."""
    scenario = load_scenario(REPO / "specs" / "support_desk" / "stubborn.toml")
    environment = load_environment(scenario.environment)
    assert build_model(scenario, environment) is not build_model(scenario, environment)


def test_build_agent_is_the_world_with_the_specs_choices(tmp_path: Path) -> None:
    """The spec's gate, limits and model over the world's tools, answer check, endings and system prompt."""
    text = HAPPY.replace('gate = "refund"', 'gate = "manager"') + "\n[limits]\nmax_turns = 5\n"
    scenario = load_scenario(_write(tmp_path, text))
    environment = load_environment(scenario.environment)
    agent = build_agent(scenario, environment)
    assert agent.tools is environment.tools and agent.gate is environment.gates["manager"]
    assert agent.limits == scenario.limits == Limits(max_turns=5)
    assert agent.system_prompt == environment.system_prompt is not None
    assert (agent.answer_check, agent.endings) == (environment.answer_check, environment.endings)
    assert isinstance(agent.model, ScriptedModel)
    replacement = ScriptedModel([answer_message("done")])
    assert build_agent(scenario, environment, model=replacement).model is replacement


def test_a_specs_system_prompt_replaces_the_worlds(tmp_path: Path) -> None:
    """system_prompt in the spec wins over the world's; an empty one means none."""
    for prompt in ("Answer in French.", ""):
        text = HAPPY.replace('gate = "refund"', f'gate = "refund"\nsystem_prompt = "{prompt}"')
        scenario = load_scenario(_write(tmp_path, text))
        agent = build_agent(scenario, load_environment(scenario.environment))
        assert agent.system_prompt == prompt
        outcome = run_scenario(scenario)
        assert outcome.passed, outcome.report()
        first = outcome.result.state.messages[0]
        assert first == {"role": "system", "content": prompt} if prompt else first["role"] == "user"


def test_every_shipped_spec_passes() -> None:
    """The repository's specs all load and hold (pytest also collects them one by one)."""
    paths = discover(REPO / "specs")
    assert len(paths) >= 20
    names = set()
    for path in paths:
        outcome = run_scenario(load_scenario(path))
        assert outcome.passed, outcome.report()
        names.add(outcome.scenario.name)
    assert len(names) == len(paths), "spec names must be unique"


# --- any parsed TOML gets a typed answer --------------------------------------------

_scalars = st.one_of(st.booleans(), st.integers(-3, 10), st.floats(allow_nan=False, width=16), st.text(max_size=4))
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)

_FULL = (
    HAPPY
    + """
history = [ { role = "user", content = "earlier" } ]

[limits]
max_turns = 6
max_tool_calls = 4

[[resume]]
approve = true
reason = "ok"
"""
)
# TOML puts top-level keys before tables; move history up so the text parses.
_FULL = _FULL.replace('gate = "refund"\n', 'gate = "refund"\nhistory = [ { role = "user", content = "earlier" } ]\n', 1)
_FULL = _FULL.replace('\nhistory = [ { role = "user", content = "earlier" } ]\n\n[limits]', "\n\n[limits]")
_FULL = _FULL.replace(
    "  { answer = ",
    '  { call = { id = "c3", name = "read_policy", raw_arguments = "" }, thought = "t" },\n  { answer = ',
    1,
)


def _paths(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _mutate(data: dict, path: tuple[object, ...], how: str, value: object) -> dict:
    data = copy.deepcopy(data)
    parent = data
    for step in path[:-1]:
        parent = parent[step]  # type: ignore[index]
    last = path[-1]
    if how == "replace":
        parent[last] = value  # type: ignore[index]
    elif how == "delete":
        del parent[last]  # type: ignore[arg-type]
    elif isinstance(parent, dict):
        parent[f"extra_{last}"] = value
    return data


def test_the_fuzzing_base_is_a_valid_spec() -> None:
    """The unmutated base loads, so every mutation starts from a spec that holds together."""
    scenario = scenario_from_data(tomllib.loads(_FULL), "base.toml")
    assert len(scenario.model.turns) == 4 and scenario.resumes and scenario.history


_BASE = tomllib.loads(_FULL)
_PATHS = _paths(_BASE)


@given(
    mutations=st.lists(
        st.tuples(st.sampled_from(_PATHS), st.sampled_from(["replace", "delete", "add"]), _values),
        min_size=1,
        max_size=2,
    )
)
def test_any_parsed_spec_loads_or_raises_spec_format_error(
    mutations: list[tuple[tuple[object, ...], str, object]],
) -> None:
    """Whatever a valid spec is mutated into, validation returns a Scenario or raises SpecFormatError naming a key."""
    data = _BASE
    for path, how, value in mutations:
        try:
            data = _mutate(data, path, how, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or retyped this path
    try:
        scenario = scenario_from_data(data, "fuzz.toml")
    except SpecFormatError as error:
        assert error.path == "fuzz.toml"
        assert error.key is None or error.key.split(".")[0].split("[")[0] in {
            *data,
            "environment",
            "task",
            "model",
            "expect",
        }
    else:
        assert isinstance(scenario.expect["stop"], Stop)
        assert all(t["role"] == "assistant" for t in scenario.model.turns)


_PANEL = (0, -1, 2.5, True, "", "x", [], [1], {}, {"k": 1})


@pytest.mark.parametrize("how", ["replace", "delete", "add"])
def test_every_single_mutation_gets_a_typed_answer(how: str) -> None:
    """Each key of a full spec, replaced by each kind of TOML value or deleted, loads or raises SpecFormatError."""
    for path in _PATHS:
        for value in _PANEL if how != "delete" else (None,):
            data = _mutate(_BASE, path, how, value)
            try:
                scenario_from_data(data, "panel.toml")
            except SpecFormatError as error:
                assert error.key is None or error.key.split(".")[0].split("[")[0] in {*data, *_BASE}, (
                    path,
                    value,
                    error,
                )
