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

from agent_fsm import Limits, Stop, ToolCall, ToolError, check_run, run
from agent_fsm.examples.retrieval import (
    LIMITS,
    PASSAGES,
    Controller,
    PinnedCorpus,
    environment,
    rule_for,
)

EXISTING = "Does put replace the value of a key that already exists?"


def _run(task, model="controller", *, gated=True, limits=LIMITS):
    env = environment()
    gate = env.gates["distinct_queries"] if gated else None
    result = run(task, env.models[model](), env.tools, gate=gate, limits=limits, answer_check=env.answer_check)
    assert all(check_run(result, env.effects, limits).values())
    return result, env


def _stop_fields(result):
    return json.loads(result.state.messages[-1]["content"])


def test_marker_found_after_one_refinement():
    """value -> read put-basic (no marker) -> exists -> read put-existing (marker): answered."""
    result, env = _run(EXISTING)
    assert result.stop is Stop.ANSWERED
    fields = json.loads(result.answer)
    assert fields == {
        "status": "completed",
        "reason": "configured_context_marker_found",
        "rule": "existing-key",
        "query_history": ["value", "exists"],
        "read_sources": ["put-basic", "put-existing"],
    }
    assert env.checks["read_put_existing"](result) and env.checks["history_kept"](result)


@pytest.mark.parametrize(
    "task, reason, queries",
    [
        ("How do I store a value durably?", "no_new_passages", ["value", "saves"]),
        ("Can I group writes in a transaction?", "no_match", ["transaction"]),
        ("What does the revision number mean?", "no_refinement_rule", ["value"]),
    ],
)
def test_incomplete_stops_are_answer_rejected_with_the_reason(task, reason, queries):
    """An incomplete stop is refused as an answer, and its reason and query history are kept."""
    result, _ = _run(task)
    assert result.stop is Stop.ANSWER_REJECTED
    assert result.reason == f"incomplete: {reason}"
    assert _stop_fields(result)["query_history"] == queries


def test_round_limit():
    """With max_rounds=1 a read without the marker ends at the round limit."""
    result, _ = _run(EXISTING, "one_round")
    assert result.reason == "incomplete: round_limit"
    assert _stop_fields(result)["read_sources"] == ["put-basic"]


def test_duplicate_query_is_refused_at_the_boundary():
    """The repeated query is denied by the gate before it runs: no_progress, with the duplicate named."""
    result, _ = _run(EXISTING, "duplicate")
    assert result.stop is Stop.NO_PROGRESS
    assert "duplicate_query: 'value' was already searched" in result.reason
    assert result.state.tool_attempts == 2


def test_without_the_gate_a_duplicate_round_is_spent():
    """Ungated, the same controller spends its second round on the same query and ends at the round limit."""
    result, _ = _run(EXISTING, "duplicate", gated=False)
    assert result.reason == "incomplete: round_limit"
    assert _stop_fields(result)["query_history"] == ["value", "value"]


def test_forged_handle_is_refused_and_the_controller_fails():
    """An altered handle is refused by read; the controller stops failed with that reason."""
    result, _ = _run(EXISTING, "forging")
    assert result.stop is Stop.ANSWER_REJECTED
    assert result.reason == "failed: error: invalid_read: the handle was altered after it was issued (source_id)"


def test_step_guard_ends_a_faulty_loop():
    """A policy that never stops meets the step guard."""
    result, _ = _run(EXISTING, "looping")
    assert result.stop is Stop.STEP_LIMIT and result.state.turns == LIMITS.max_turns


def test_tool_budget_is_checked_before_dispatch():
    """With three tool attempts the final read is never dispatched."""
    result, _ = _run(EXISTING, limits=Limits(max_turns=7, repeated_denials=1, max_tool_calls=3))
    assert result.stop is Stop.TOOL_LIMIT and result.state.tool_attempts == 3


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
