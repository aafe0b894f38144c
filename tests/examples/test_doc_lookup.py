"""
Tests for agent_fsm.examples.doc_lookup: each scenario as a direct run.

The specs under specs/doc_lookup/ are run by the spec plugin; the one spec test here checks that
this environment's expectations can fail.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from agent_fsm import Limits, ScriptedModel, Stop, ToolError, check_run
from agent_fsm.engine import answer_message, tool_call_message
from agent_fsm.examples import doc_lookup
from agent_fsm.examples.doc_lookup import (
    EXPECTED,
    LIMITS,
    Corpus,
    environment,
    outcome_ok,
)
from agent_fsm.scenarios import run_scenario, scenario_from_data

TASK = "How do I roll back staging to the last good release?"
FINAL_SPEC = Path(__file__).resolve().parents[2] / "specs" / "doc_lookup" / "final.toml"


def _run(model_name: str, limits: Limits = LIMITS, model=None):
    env = environment()
    model = model if model is not None else env.models[model_name]()
    result = env.agent(model, limits=limits).run(TASK)
    assert all(check_run(result, env.effects, limits).values())
    return result


def test_spec_with_wrong_expectations_reports_each_one():
    """The final spec with three altered expectations fails on exactly those three, invariants intact."""
    data = tomllib.loads(FINAL_SPEC.read_text())
    data["expect"].update(stop="step_limit", turns=9, checks={"outcome_ok": False})
    outcome = run_scenario(scenario_from_data(data, FINAL_SPEC))
    assert not outcome.passed
    assert [e.name for e in outcome.failures] == ["stop", "turns", "check outcome_ok"]
    assert outcome.report().count("FAILED") == 4  # the header line and the three expectations


def test_final_reads_then_cites_the_page_it_read():
    """Search, read, final: three turns, two tools, the right command and source."""
    result = _run("scripted")
    assert result.stop is Stop.ANSWERED
    assert json.loads(result.answer) == EXPECTED
    assert (result.state.turns, result.state.tool_attempts) == (3, 2)
    assert outcome_ok(result)


def test_invalid_decision_stops_without_dispatch():
    """An action outside the interface is refused and no tool allowance is spent."""
    result = _run("shell_action")
    assert result.stop is Stop.NO_PROGRESS
    assert result.state.tool_attempts == 0
    assert "unknown tool: 'shell'" in result.reason
    assert not outcome_ok(result)


def test_extra_field_is_refused_as_invalid():
    """A read with a field the contract lacks is refused before the handler runs."""
    model = ScriptedModel([tool_call_message("d1", "read", {"page_id": "rollback-v2", "version": "v1"})])
    result = _run("", model=model)
    assert result.stop is Stop.NO_PROGRESS
    assert [o.kind for o in result.state.observations] == ["invalid"]
    assert "Additional properties" in result.state.observations[0].content


def test_provider_error_is_not_an_answer():
    """An OSError from the policy ends provider_error on the first turn, with no answer."""
    result = _run("provider_down")
    assert result.stop is Stop.PROVIDER_ERROR
    assert result.answer is None and result.state.fault.type == "ConnectionRefusedError"


def test_unread_citation_is_rejected():
    """Citing a page never read ends answer_rejected, even though the command is right."""
    result = _run("cites_unread")
    assert result.stop is Stop.ANSWER_REJECTED
    assert result.reason == "the answer cites 'rollback-v2', which was not read in this run"


def test_search_hit_alone_does_not_license_a_citation():
    """A page found by search but not read still cannot be cited."""
    model = ScriptedModel(
        [
            tool_call_message("d1", "search", {"query": TASK}),
            answer_message(json.dumps(EXPECTED)),
        ]
    )
    result = _run("", model=model)
    assert result.stop is Stop.ANSWER_REJECTED


def test_endless_search_hits_the_tool_limit():
    """A policy that keeps searching stops at tool_limit on turn four with three tools spent."""
    result = _run("always_search")
    assert result.stop is Stop.TOOL_LIMIT
    assert (result.state.turns, result.state.tool_attempts) == (4, 3)


def test_turn_limit_is_not_a_final_answer():
    """One turn allows the search but no answer: step_limit, not answered."""
    result = _run("scripted", limits=Limits(max_turns=1, max_tool_calls=3, repeated_denials=1))
    assert result.stop is Stop.STEP_LIMIT
    assert result.answer is None and not outcome_ok(result)


def test_wrong_version_read_is_an_error_the_policy_recovers_from():
    """The v1 page is refused in a v2 lookup; the policy then finds and cites the v2 page."""
    result = _run("wrong_version_first")
    first = result.state.observations[0]
    assert (first.kind, first.content) == ("error", "page 'rollback-v1' documents v1; this lookup is pinned to v2")
    assert result.stop is Stop.ANSWERED and outcome_ok(result)
    assert (result.state.turns, result.state.tool_attempts) == (4, 3)


def test_invented_command_fails_the_outcome_check():
    """Answered, cited and read, yet the outcome fails because the command is not the page's."""
    result = _run("invents_command")
    assert result.stop is Stop.ANSWERED
    assert json.loads(result.answer)["citation"] == "rollback-v2"
    assert not outcome_ok(result)


def test_corpus_is_pinned_to_its_version():
    """Search only returns pages of the pinned version; read refuses other versions and unknown ids."""
    v1 = Corpus(doc_lookup.CORPUS, "v1")
    assert [hit["id"] for hit in v1.search("roll back")] == ["rollback-v1"]
    with pytest.raises(ToolError, match="pinned to v1"):
        v1.read("rollback-v2")
    with pytest.raises(ToolError, match="no page 'nope'"):
        v1.read("nope")
    assert Corpus(doc_lookup.CORPUS, "v2").search("unrelated words only") == []


@pytest.mark.parametrize(
    ("question", "version", "fragment"),
    [
        ("How do I roll back?", "v3", "unsupported documentation version 'v3'"),
        ("   ", "v2", "question must be a string of 1..500"),
        ("x" * 501, "v2", "question must be a string of 1..500"),
        (7, "v2", "question must be a string"),
    ],
)
def test_a_lookup_is_validated_before_it_runs(question, version, fragment):
    """A version the docs lack, or a blank or oversized question, is refused, never run on an empty corpus."""
    with pytest.raises(ValueError, match=fragment):
        doc_lookup.Lookup(question, version)


def test_an_environment_pinned_to_an_unknown_version_is_refused():
    """environment("v3") used to search an empty corpus; it now says what it expected."""
    with pytest.raises(ValueError, match=r"expected one of \['v1', 'v2'\]"):
        environment("v3")
    assert doc_lookup.Lookup("How do I roll back?", "v1").version == "v1"


def test_the_glossary_makes_revert_find_the_rollback_page():
    """Without alias expansion the deploy page ranks first for "revert"; with it, the rollback page does."""
    question = "How do I revert the staging release?"
    assert Corpus(doc_lookup.CORPUS, "v2", glossary={}).search(question)[0]["id"] == "deploy-v2"
    assert Corpus(doc_lookup.CORPUS, "v2").search(question)[0]["id"] == "rollback-v2"


@pytest.mark.parametrize(
    ("policy", "stop", "code"),
    [
        ("scripted", Stop.ANSWERED, "final"),
        ("shell_action", Stop.NO_PROGRESS, "invalid_decision"),
        ("unparseable", Stop.NO_PROGRESS, "invalid_decision"),
        ("provider_down", Stop.PROVIDER_ERROR, "provider_error"),
        ("cites_unread", Stop.ANSWER_REJECTED, "unread_citation"),
        ("always_search", Stop.TOOL_LIMIT, "tool_limit"),
    ],
)
def test_each_ending_of_the_text_has_its_code(policy, stop, code):
    """The lookup's six endings are told apart by RunResult.code, not by reading reason strings."""
    env = environment()
    result = env.agent(env.models[policy](), limits=LIMITS).run(TASK)
    assert (result.stop, result.code) == (stop, code)


def test_the_saved_trace_names_the_policy_and_provider():
    """The --save trace says which policy proposed, and that no real provider or model was involved."""
    from agent_fsm.scenarios import load_scenario

    spec = load_scenario(FINAL_SPEC)
    data = run_scenario(spec).to_data()
    assert data["policy"] == {"name": "scripted", "provider": "scripted", "model": None}
    assert data["code"] == "final"

    class Remote:
        provider, model = "openai", "gpt-test"

        def chat(self, messages, tools=()):
            return answer_message(json.dumps({"answer": "x", "citation": ""}))

    remote = run_scenario(spec, model=Remote()).to_data()
    assert remote["policy"] == {"name": "scripted", "provider": "openai", "model": "gpt-test"}


def test_lookup_validates_the_task_before_running_it():
    """lookup() refuses v3 before any run, and runs a valid task to its coded ending."""
    with pytest.raises(ValueError, match="unsupported documentation version 'v3'"):
        doc_lookup.lookup("How do I roll back staging?", version="v3")
    with pytest.raises(ValueError, match="unknown policy"):
        doc_lookup.lookup("How do I roll back staging?", policy="oracle")
    result = doc_lookup.lookup(TASK)
    assert (result.stop, result.code) == (Stop.ANSWERED, "final") and outcome_ok(result)
    assert doc_lookup.lookup(TASK, policy="cites_unread").code == "unread_citation"
