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

from agent_fsm import Limits, ScriptedModel, Stop, ToolError, ToolSpec, check_run
from agent_fsm.engine import answer_message, named, tool_call_message
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


# --- the task's metadata and the case table -------------------------------------------


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"environment": "production"}, "covers the staging environment only; got 'production'"),
        ({"environment": ""}, "environment must be a string of 1..100"),
        ({"id": ""}, "id must be a string of 1..100"),
        ({"id": "x" * 101}, "id must be a string of 1..100"),
        ({"family": "   "}, "family must be a string of 1..100"),
        ({"family": 3}, "family must be a string"),
    ],
)
def test_a_task_outside_staging_or_with_unbounded_metadata_is_refused(fields, fragment):
    """The lookup covers staging only, and its id and family are bounded, non-blank strings."""
    with pytest.raises(ValueError, match=fragment):
        doc_lookup.Lookup(TASK, "v2", **fields)


def test_a_task_names_its_case_and_family():
    """A valid task keeps its metadata; an ad hoc question gets the ad hoc id and family, in staging."""
    task = doc_lookup.Lookup(TASK, "v2", id="rollback-direct", family="rollback")
    assert (task.id, task.family, task.environment) == ("rollback-direct", "rollback", "staging")
    assert (doc_lookup.Lookup(TASK).id, doc_lookup.Lookup(TASK).family) == ("ad-hoc", "ad-hoc")


def test_every_case_is_a_valid_task_with_a_unique_id():
    """The case table holds well-formed tasks only, each id once, rollback-direct first (the default)."""
    ids = [case["id"] for case in doc_lookup.CASES]
    assert ids[0] == doc_lookup.DEFAULT_CASE == "rollback-direct"
    assert len(ids) == len(set(ids)) >= 5
    for case in doc_lookup.CASES:
        assert doc_lookup.task_of(case).id == case["id"]


@pytest.mark.parametrize("case_id", [case["id"] for case in doc_lookup.CASES])
def test_the_scripted_policy_meets_every_case(case_id):
    """Each case, run with the scripted policy, answers its own command citing its own page: the outcome holds."""
    result, held = doc_lookup.run_case(case_id)
    case = doc_lookup.case(case_id)
    assert (result.stop, result.code, held) == (Stop.ANSWERED, "final", True)
    assert json.loads(result.answer) == {"answer": case["answer"], "citation": case["citation"]}


def test_the_outcome_of_a_case_is_judged_against_that_case():
    """The rollback answer is right for rollback-direct and wrong for the logs case: the outcome reads the case."""
    result, _ = doc_lookup.run_case("rollback-direct")
    logs = doc_lookup.case("logs-follow")
    assert not outcome_ok(result, expected={"answer": logs["answer"], "citation": logs["citation"]})
    _, held = doc_lookup.run_case("rollback-direct", policy="invents_command")
    assert held is False


def test_an_unknown_case_names_the_known_ones():
    """A mistyped case id is a ValueError listing the table's ids."""
    with pytest.raises(ValueError, match="unknown case 'rollback'; expected one of .*'rollback-direct'"):
        doc_lookup.case("rollback")


# --- behaviour of the scripted policy and the decision interface, pinned ---------------------


def test_the_scripted_policy_answers_honestly_when_no_page_matches():
    """A search with no hit ends in a final decision saying so, citing nothing: answered, but not the outcome."""
    env = environment()
    result = env.agent(env.models["scripted"](), limits=LIMITS).run("zebra quasar")
    assert (result.stop, result.code) == (Stop.ANSWERED, "final")
    assert json.loads(result.answer) == {"answer": "No page matches the question.", "citation": ""}
    assert result.state.tool_attempts == 1 and not outcome_ok(result)


def test_the_scripted_policy_reports_a_failed_read_instead_of_answering():
    """A read that fails ends in a final decision quoting the failure, citing nothing; no command is made up."""
    env = environment()

    def unavailable(page_id: str) -> dict[str, str]:
        raise ToolError(f"the documentation store cannot serve {page_id!r} right now")

    read = env.tools["read"]
    env.tools["read"] = ToolSpec(read.description, read.schema, unavailable)
    result = env.agent(env.models["scripted"](), limits=LIMITS).run(TASK)
    fields = json.loads(result.answer)
    assert (result.stop, result.code, fields["citation"]) == (Stop.ANSWERED, "final", "")
    assert fields["answer"].startswith("I could not finish:")
    assert "cannot serve 'rollback-v2' right now" in fields["answer"]
    assert [o.kind for o in result.state.observations] == ["result", "error"]
    assert not outcome_ok(result)


def test_a_policy_gets_its_own_copy_of_the_observations():
    """
    What a policy does to the observations it is handed changes nothing the run keeps or later shows it.

    The policy empties the list and rewrites the entry it read; its next call still sees the search
    result as the tool returned it, and the transcript is untouched.
    """
    seen: list[list[dict]] = []

    def vandal(task, observations):
        seen.append(json.loads(json.dumps(observations)))
        decision = doc_lookup.scripted(task, observations)
        for entry in observations:
            entry["result"] = "forged"
            entry["ok"] = False
        observations.clear()
        return decision

    env = environment()
    result = env.agent(named(vandal, final=doc_lookup.FINAL)(), limits=LIMITS).run(TASK)
    assert (result.stop, result.code) == (Stop.ANSWERED, "final") and outcome_ok(result)
    assert [len(s) for s in seen] == [0, 1, 2]
    assert seen[2][0]["result"] == [
        {"id": "rollback-v2", "title": "Rolling back a deployment"},
        {"id": "deploy-v2", "title": "Deploying a release"},
    ]
    assert all(o.ok for o in result.state.observations)
