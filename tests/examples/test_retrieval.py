"""
Tests for agent_fsm.examples.retrieval: declared refinement rules, pinned handles, and each stop's mapping.

The specs under specs/retrieval/ are run by the spec plugin; these tests drive the controller directly.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from agent_fsm import Limits, Stop, ToolCall, ToolError, check_run
from agent_fsm.examples.retrieval import (
    LIMITS,
    PASSAGES,
    Controller,
    PinnedCorpus,
    environment,
    rule_for,
    run_report,
)

EXISTING = "Does put replace the value of a key that already exists?"


def _run(task, model="controller", *, gated=False, limits=LIMITS):
    env = environment()
    gate = env.gates["distinct_queries"] if gated else None
    result = env.agent(env.models[model](), gate=gate, limits=limits).run(task)
    assert all(check_run(result, env.effects, limits).values())
    return result, env


def _stop_fields(result):
    return json.loads(result.state.messages[-1]["content"])


def test_marker_found_after_one_refinement():
    """value -> read put-basic (no marker) -> exists -> read put-existing (marker): answered."""
    result, env = _run(EXISTING)
    assert (result.stop, result.code) == (Stop.ANSWERED, "configured_context_marker_found")
    fields = json.loads(result.answer)
    assert fields == {
        "status": "completed",
        "reason": "configured_context_marker_found",
        "detail": "",
        "policy": rule_for(EXISTING),
        "question": EXISTING,
        "version": "2.4",
        "query_history": ["value", "exists"],
        "read_sources": ["put-basic", "put-existing"],
    }
    assert env.checks["read_put_existing"](result) and env.checks["history_kept"](result)


def test_the_result_carries_the_full_policy_configuration():
    """Not only the rule's name: every field the controller ran with, as it ran with it."""
    result, _ = _run(EXISTING, "one_round")
    assert _stop_fields(result)["policy"] == {
        "name": "existing-key",
        "initial_query": "value",
        "refinement_query": "exists",
        "required_marker": "replaces",
        "max_rounds": 1,
    }


@pytest.mark.parametrize(
    "task, code, queries",
    [
        ("How do I store a value durably?", "no_new_passages", ["value", "saves"]),
        ("Can I group writes in a transaction?", "round_limit", ["transaction", "commit"]),
        ("What does the revision number mean?", "no_refinement_rule", ["value"]),
    ],
)
def test_incomplete_stops_are_answer_rejected_with_their_code(task, code, queries):
    """An incomplete stop is refused as an answer; its code is the controller's reason, its history is kept."""
    result, _ = _run(task)
    assert (result.stop, result.code) == (Stop.ANSWER_REJECTED, code)
    assert result.reason == f"incomplete: {code}"
    assert _stop_fields(result)["query_history"] == queries


def test_an_empty_search_goes_on_to_the_refined_query():
    """no_match is not an ending: the transaction rule's first query finds nothing, so it searches 'commit'."""
    result, _ = _run("Can I group writes in a transaction?")
    searched = [
        json.loads(c["function"]["arguments"])["query"]
        for m in result.state.messages
        for c in m.get("tool_calls") or ()
    ]
    assert searched == ["transaction", "commit"]
    assert [o.content["results"] for o in result.state.observations] == [[], []]


def test_round_limit():
    """With max_rounds=1 a read without the marker ends at the round limit."""
    result, _ = _run(EXISTING, "one_round")
    assert result.code == "round_limit"
    assert _stop_fields(result)["read_sources"] == ["put-basic"]


@pytest.mark.parametrize("gated", [False, True])
def test_the_controller_itself_stops_a_duplicate_query(gated):
    """The rule lives in the controller: with or without the gate, the repeated query is never issued."""
    result, _ = _run(EXISTING, "duplicate", gated=gated)
    assert (result.stop, result.code) == (Stop.ANSWER_REJECTED, "duplicate_query")
    assert "'value' was already searched" in result.reason
    assert _stop_fields(result)["query_history"] == ["value"]
    assert result.state.tool_attempts == 2 and [o.kind for o in result.state.observations] == ["result", "result"]


def test_forged_handle_is_refused_and_the_controller_fails():
    """An altered handle is refused by read; the controller stops failed, code invalid_read read from typed data."""
    result, _ = _run(EXISTING, "forging")
    assert (result.stop, result.code) == (Stop.ANSWER_REJECTED, "invalid_read")
    assert result.reason == "failed: invalid_read (error: the handle was altered after it was issued (source_id))"
    assert _stop_fields(result)["status"] == "failed"


def test_step_guard_ends_a_faulty_loop():
    """A policy that never stops meets the step guard."""
    result, _ = _run(EXISTING, "looping")
    assert (result.stop, result.code) == (Stop.STEP_LIMIT, "controller_step_guard")
    assert result.state.turns == LIMITS.max_turns


def test_tool_budget_is_checked_before_dispatch():
    """With three tool attempts the final read is never dispatched."""
    result, _ = _run(EXISTING, limits=Limits(max_turns=7, repeated_denials=1, max_tool_calls=3))
    assert (result.stop, result.code) == (Stop.TOOL_LIMIT, "tool_limit") and result.state.tool_attempts == 3


@pytest.mark.parametrize("question", ["", "   ", "x" * 513])
def test_an_invalid_question_is_a_typed_ending(question):
    """A blank or oversized question stops invalid_question before any search."""
    result, _ = _run(question)
    assert (result.stop, result.code, result.state.tool_attempts) == (Stop.ANSWER_REJECTED, "invalid_question", 0)


@pytest.mark.parametrize(
    ("version", "fragment"),
    [("3", "looks like '2.4'"), ("v2.4", "looks like"), (2.4, "looks like"), ("3.1", "documents 2.4")],
)
def test_an_invalid_version_fails_when_the_controller_is_built(version, fragment):
    """The version is validated before any run, as the configuration is."""
    with pytest.raises(ValueError, match=f"invalid_version: .*{re.escape(fragment)}"):
        Controller(version=version)


def test_rules_are_chosen_from_question_words_only():
    """The rule comes from the question's words; a question without cues gets no refinement."""
    assert rule_for(EXISTING)["name"] == "existing-key"
    assert rule_for("What if the key is missing?")["refinement_query"] == "default"
    assert rule_for("Tell me about revisions") == {
        "name": "no-matching-rule",
        "initial_query": "value",
        "refinement_query": None,
        "required_marker": None,
        "max_rounds": 2,
    }


@pytest.mark.parametrize(
    "config, fragment",
    [
        ({"name": "x"}, "exactly the fields"),
        (
            {
                "name": "x",
                "initial_query": "Two Words",
                "refinement_query": None,
                "required_marker": None,
                "max_rounds": 2,
            },
            "initial_query",
        ),
        (
            {"name": "x", "initial_query": "a", "refinement_query": None, "required_marker": "", "max_rounds": 2},
            "required_marker",
        ),
        (
            {"name": "x", "initial_query": "a", "refinement_query": None, "required_marker": None, "max_rounds": 9},
            "max_rounds",
        ),
    ],
)
def test_bad_controller_config_fails_before_any_run(config, fragment):
    """A malformed configuration is refused when the controller is built."""
    with pytest.raises(ValueError, match=fragment):
        Controller(config)


def _handle(corpus: PinnedCorpus, query: str = "value") -> dict:
    return corpus.search(query)["results"][0]


def test_read_returns_the_hashed_passage_for_an_issued_handle():
    """An issued, unchanged handle reads its passage."""
    corpus = PinnedCorpus()
    handle = _handle(corpus)
    assert corpus.read(handle)["text"] == dict(PASSAGES)[handle["source_id"]]


@pytest.mark.parametrize(
    "tamper, fragment",
    [
        (lambda h: {**h, "read_token": "0" * 32}, "never issued"),
        (lambda h: {**h, "rank": 2}, "altered after it was issued (rank)"),
        (lambda h: {**h, "text_sha256": "f" * 64}, "altered after it was issued (text_sha256)"),
    ],
)
def test_forged_handles_are_refused(tamper, fragment):
    """A token never issued, or any field changed after issue, is refused."""
    corpus = PinnedCorpus()
    with pytest.raises(ToolError, match=re.escape(fragment)):
        corpus.read(tamper(_handle(corpus)))


def test_stale_handle_is_refused_after_republishing():
    """A handle issued before the corpus changed is stale, even for an unchanged passage."""
    corpus = PinnedCorpus()
    handle = _handle(corpus)
    old_id = corpus.corpus_id
    corpus.publish([*PASSAGES, ("compact", "Store.compact() rewrites the log file.")])
    assert corpus.corpus_id != old_id
    with pytest.raises(ToolError, match="stale"):
        corpus.read(handle)


def test_changed_text_behind_a_valid_handle_is_refused():
    """If a passage's text changes under a live handle, the hash check refuses the read."""
    corpus = PinnedCorpus()
    handle = _handle(corpus)
    corpus.passages[handle["source_id"]]["text"] += " (edited)"
    with pytest.raises(ToolError, match="no longer matches its hash"):
        corpus.read(handle)


def test_query_history_is_kept_in_order_and_gate_allows_new_queries():
    """Every query searched is kept; the gate denies only repeats."""
    corpus = PinnedCorpus()
    corpus.search("value")
    corpus.search("exists")
    assert corpus.query_history == ["value", "exists"]
    assert corpus.distinct_queries(ToolCall("c", "search", {"query": "value", "k": 2})).kind == "deny"
    assert corpus.distinct_queries(ToolCall("c", "search", {"query": "absent", "k": 2})).kind == "allow"
    assert corpus.distinct_queries(ToolCall("c", "read", {"handle": {}})).kind == "allow"


_HANDLE_VALUES = st.one_of(st.text(alphabet="0123456789abcdef", min_size=1, max_size=64), st.integers(1, 3))


@given(
    field=st.sampled_from(["corpus_id", "source_id", "version", "text_sha256", "rank", "read_token"]),
    value=_HANDLE_VALUES,
)
def test_any_alteration_of_an_issued_handle_is_refused(field, value):
    """Changing any one field of an issued handle to any other value makes read refuse it."""
    corpus = PinnedCorpus()
    handle = _handle(corpus)
    assume(handle[field] != value)
    with pytest.raises(ToolError, match="invalid_read"):
        corpus.read({**handle, field: value})


# --- the combined run report -------------------------------------------------------


def test_the_run_report_holds_the_normal_run_and_the_controlled_duplicate():
    """One report: how it ran (no model), the corpus id, the normal run's completion and the duplicate stop."""
    report = run_report()
    assert report["execution_mode"] == "offline-scripted-retrieval-controller"
    assert report["model_called"] is False
    assert report["corpus_id"] == PinnedCorpus().corpus_id
    assert re.fullmatch(r"[0-9a-f]{64}", report["corpus_id"])
    normal = report["controller"]
    assert (normal["status"], normal["reason"]) == ("completed", "configured_context_marker_found")
    assert (normal["stop"], normal["code"]) == ("answered", "configured_context_marker_found")
    assert normal["question"] == EXISTING and normal["version"] == "2.4"
    assert normal["policy"] == rule_for(EXISTING)
    assert normal["query_history"] == ["value", "exists"]
    assert normal["read_sources"] == ["put-basic", "put-existing"]
    assert [(o["tool"], o["ok"]) for o in normal["observations"]] == [
        ("search", True),
        ("read", True),
        ("search", True),
        ("read", True),
    ]
    assert {o["result"]["corpus_id"] for o in normal["observations"]} == {report["corpus_id"]}
    duplicate = report["controlled_duplicate_stop"]
    assert (duplicate["status"], duplicate["reason"]) == ("incomplete", "duplicate_query")
    assert (duplicate["stop"], duplicate["code"]) == ("answer_rejected", "duplicate_query")
    assert duplicate["policy"]["name"] == "controlled-duplicate"
    assert duplicate["query_history"] == ["value"] and duplicate["read_sources"] == ["put-basic"]
    assert [o["tool"] for o in duplicate["observations"]] == ["search", "read"]
    assert "no model" in report["interpretation"]
    assert json.loads(json.dumps(report)) == report


def test_the_run_report_of_a_question_without_a_rule():
    """The report takes any question: one no rule covers stops no_refinement_rule, and the duplicate stop still runs."""
    report = run_report("How fast is it?")
    assert (report["controller"]["status"], report["controller"]["reason"]) == ("incomplete", "no_refinement_rule")
    assert report["controlled_duplicate_stop"]["reason"] == "duplicate_query"


def test_the_run_report_refuses_a_bad_question_before_running():
    """A blank question is a ValueError, not a report of an invalid run."""
    with pytest.raises(ValueError, match="question"):
        run_report("   ")
