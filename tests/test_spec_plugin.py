"""The pytest plugin: every specs/**/*.toml file becomes one test item with a readable failure."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

OVERREACH = Path(__file__).resolve().parents[1] / "specs" / "support_desk" / "overreach_denied.toml"


@pytest.fixture
def spec_dir(pytester: pytest.Pytester) -> Path:
    specs = pytester.path / "specs"
    specs.mkdir()
    (specs / "conftest.py").write_text("from agent_fsm.scenarios.plugin import pytest_collect_file\n")
    return specs


def test_specs_are_collected_and_judged(pytester: pytest.Pytester, spec_dir: Path) -> None:
    """A holding spec passes, a wrong one fails with the expectation report and transcript."""
    (spec_dir / "good.toml").write_text(OVERREACH.read_text())
    (spec_dir / "wrong.toml").write_text(
        OVERREACH.read_text().replace("turns = 4", "turns = 9").replace("overreach-denied", "wrong")
    )
    (spec_dir / "notes.txt").write_text("not a spec")
    result = pytester.runpytest("specs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*spec support-desk/wrong*",
            "*FAILED  turns: expected 9, got 4*",
            '*-> refund_order {"order_id": "A-17", "amount_cents": 9999}*',
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_malformed_spec_is_a_one_line_failure(pytester: pytest.Pytester, spec_dir: Path) -> None:
    """A malformed spec is collected, fails, and names the file and the key."""
    (spec_dir / "bad.toml").write_text(OVERREACH.read_text().replace('gate = "refund"', "gate = 7"))
    result = pytester.runpytest("specs", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*malformed spec: *bad.toml: key 'gate': expected a string, got an integer 7*"])


def test_toml_outside_specs_is_ignored(pytester: pytest.Pytester) -> None:
    """Only files under a specs directory are specs; other TOML is left alone."""
    (pytester.path / "conftest.py").write_text("from agent_fsm.scenarios.plugin import pytest_collect_file\n")
    (pytester.path / "settings.toml").write_text("x = 1\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
