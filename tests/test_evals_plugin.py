"""The evals' pytest plugin: each case of a *.eval.toml dataset is a test item, only where a conftest enables it."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

DATASET = """
name = "desk"
world = "agent_fsm.examples.support_desk:environment"
repeat = 2

[[case]]
name = "answers"
task = "Sort out A-17."
gate = "refund"
model = { turns = [{ answer = "Done." }] }
expect = { stop = "answered", effects = [] }

[[case]]
name = "refunds"
task = "Sort out A-17."
gate = "refund"
model = { turns = [{ answer = "Refunded." }] }
expect = { stop = "answered", effects = [{ order_id = "A-17", refunded_cents = 4999 }] }
"""


@pytest.fixture
def evals_dir(pytester: pytest.Pytester) -> Path:
    folder = pytester.path / "evals"
    folder.mkdir()
    (folder / "desk.eval.toml").write_text(DATASET)
    return folder


def test_each_case_is_an_item_failing_with_its_reasons(pytester: pytest.Pytester, evals_dir: Path) -> None:
    """With the plugin enabled, a passing case passes and a failing one lists each failed run's reasons."""
    (evals_dir / "conftest.py").write_text("from agent_fsm.evals.plugin import pytest_collect_file\n")
    result = pytester.runpytest("evals", "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*desk.eval.toml::answers PASSED*",
            "*case refunds: 0/2 runs passed, threshold 100%*",
            "*FAILED  expect: *FAILED  effects: expected [{*4999*",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_a_malformed_dataset_is_one_failing_item(pytester: pytest.Pytester, evals_dir: Path) -> None:
    """A dataset with a wrong key is collected as one item that fails naming the file and the key."""
    (evals_dir / "conftest.py").write_text("from agent_fsm.evals.plugin import pytest_collect_file\n")
    (evals_dir / "desk.eval.toml").write_text(DATASET.replace("repeat = 2", "repeats = 2"))
    result = pytester.runpytest("evals", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*desk.eval.toml: key 'repeats': unknown key*"])


def test_the_plugin_does_not_activate_by_itself(pytester: pytest.Pytester, evals_dir: Path) -> None:
    """Without a conftest importing it nothing is collected: no entry point registers it for every project."""
    result = pytester.runpytest("evals", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    registered = [e.value for e in entry_points(group="pytest11")]
    assert not any(value.startswith("agent_fsm") for value in registered)
