"""Tests for agent_fsm.examples.compare: the canon measured on one task."""

from __future__ import annotations

from agent_fsm.examples.compare import Row, compare_rows, format_table


def test_every_pattern_lands_the_one_correct_refund_at_the_seeds_call_counts():
    """Calls: chain 1/2, router 2/2, parallel 1/3, evaluator 2/2, agent 4/3, plan 2/3; every refund correct."""
    rows = compare_rows()
    assert [(r.pattern, r.model_calls, r.tool_calls) for r in rows] == [
        ("chain", 1, 2),
        ("router", 2, 2),
        ("parallel", 1, 3),
        ("evaluator", 2, 2),
        ("agent", 4, 3),
        ("plan", 2, 3),
    ]
    assert all(r.refund_landed for r in rows)
    assert [r.ending for r in rows] == ["replied", "replied", "replied", "accepted", "answered", "replied"]


def test_the_agent_pays_most_in_prompt_tokens_and_the_chain_least():
    """Resending a growing transcript costs the agent most; the chain's single prompt costs least."""
    tokens = {r.pattern: r.prompt_tokens for r in compare_rows()}
    assert min(tokens, key=tokens.get) == "chain"
    assert max(tokens, key=tokens.get) == "agent"
    assert tokens["agent"] > 4 * max(v for k, v in tokens.items() if k != "agent")


def test_compare_rows_are_reproducible():
    """Two runs against fresh desks give identical rows (scripted models, no shared state)."""
    assert compare_rows() == compare_rows()


def test_format_table_aligns_columns_and_marks_a_missed_refund():
    """Each line has the same width, numbers right-aligned, and a missed refund reads 'no'."""
    table = format_table([Row("chain", 1, 2, 35, "replied", True), Row("long-name", 10, 0, 7, "step_failed", False)])
    lines = table.splitlines()
    assert len({len(line) for line in lines}) == 1
    assert lines[0].startswith("| pattern ") and "|          10 |" in lines[3]
    assert lines[3].rstrip(" |").endswith("no") and lines[2].rstrip(" |").endswith("yes")
