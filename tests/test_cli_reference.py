"""``agent-fsm lookup`` and ``agent-fsm refine``: the reference systems' own commands, their output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agent_fsm.cli import app
from agent_fsm.examples.doc_lookup import CASES
from agent_fsm.examples.pinned_corpus import PinnedCorpus

runner = CliRunner()


def _invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_lookup_runs_the_default_case_and_says_the_outcome_held() -> None:
    """With no option: rollback-direct, each decision, the answer, its source, the ending and the outcome, exit 0."""
    code, out, _ = _invoke("lookup")
    assert code == 0
    assert out.splitlines() == [
        "case rollback-direct (rollback, v2, staging): How do I roll back staging to the last good release?",
        "turn 1: search",
        "turn 2: read",
        "turn 3: final",
        "answer: harborctl rollback --env staging --to last-healthy",
        "source: rollback-v2",
        "ending: answered (code final) | independent outcome: held",
        "policy: scripted",
    ]


def test_lookup_case_and_save_write_the_trace(tmp_path: Path) -> None:
    """--case picks a case; --save writes the case, the task, the policy and the run as JSON."""
    trace = tmp_path / "trace.json"
    code, out, _ = _invoke("lookup", "--case", "rollback-v1", "--save", str(trace))
    assert code == 0
    assert "answer: harborctl deploy --env staging --build PREVIOUS" in out
    assert f"trace saved to {trace}" in out
    data = json.loads(trace.read_text())
    assert data["case"] == "rollback-v1" and data["policy"] == "scripted"
    assert data["task"] == {
        "id": "rollback-v1",
        "family": "rollback",
        "question": "How do I roll back staging?",
        "version": "v1",
        "environment": "staging",
    }
    assert (data["stop"], data["code"], data["outcome_held"]) == ("answered", "final", True)
    assert data["answer"] == {"answer": "harborctl deploy --env staging --build PREVIOUS", "citation": "rollback-v1"}
    assert data["state"]["turns"] == 3


def test_lookup_exits_1_when_the_outcome_does_not_hold() -> None:
    """A policy that invents its command ends answered, but the independent outcome fails: exit 1."""
    code, out, _ = _invoke("lookup", "--policy", "invents_command")
    assert code == 1
    assert "ending: answered (code final) | independent outcome: FAILED" in out
    assert "answer: harborctl undo --env staging" in out


def test_lookup_refuses_an_unknown_case_or_policy_in_one_line() -> None:
    """A mistyped case is one error line listing the cases (exit 1); an unknown policy is a usage error (exit 2)."""
    code, out, err = _invoke("lookup", "--case", "rollback")
    assert code == 1 and out == ""
    assert err.startswith("error: unknown case 'rollback'; expected one of") and err.count("\n") == 1
    code, _, err = _invoke("lookup", "--policy", "oracle")
    assert code == 2 and "oracle" in err


def test_lookup_list_names_every_case() -> None:
    """--list prints one line per case: id, family, version and question."""
    code, out, _ = _invoke("lookup", "--list")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == [case["id"] for case in CASES]
    assert "rollback-alias  rollback  v2  How do I revert the staging release?" in out


def test_refine_prints_both_runs_and_saves_the_report(tmp_path: Path) -> None:
    """The normal run's queries and reads, the duplicate stop, and the whole report saved with --output."""
    report = tmp_path / "report.json"
    code, out, _ = _invoke("refine", "--output", str(report))
    assert code == 0
    corpus_id = PinnedCorpus().corpus_id
    assert out.splitlines()[:8] == [
        "execution mode: offline-scripted-retrieval-controller (no model called)",
        f"corpus: {corpus_id}",
        "normal run: completed (configured_context_marker_found)",
        "  queries: value -> exists",
        "  read: put-basic, put-existing",
        "controlled duplicate: incomplete (duplicate_query)",
        "  queries: value",
        "  read: put-basic",
    ]
    data = json.loads(report.read_text())
    assert data["model_called"] is False and data["corpus_id"] == corpus_id
    assert data["controlled_duplicate_stop"]["reason"] == "duplicate_query"
    assert data["interpretation"] in out


def test_refine_refuses_a_blank_question_in_one_line(tmp_path: Path) -> None:
    """A blank question is an error line and exit 1; no report file is written."""
    report = tmp_path / "report.json"
    code, _, err = _invoke("refine", "--question", "  ", "--output", str(report))
    assert code == 1 and err.startswith("error: the question must be 1..512 characters")
    assert not report.exists()


def test_an_unwritable_save_or_output_path_is_one_error_line(tmp_path: Path) -> None:
    """--save or --output into a folder that does not exist: exit 1 and one line naming the path, no traceback."""
    missing = tmp_path / "no-such-folder" / "out.json"
    for args in (("lookup", "--save", str(missing)), ("refine", "--output", str(missing))):
        code, _, err = _invoke(*args)
        assert code == 1, args
        assert err.startswith(f"error: cannot write {missing}:") and err.count("\n") == 1
