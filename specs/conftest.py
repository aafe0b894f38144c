"""Every ``*.toml`` file under specs/ is collected as one test item (see agent_fsm.scenarios.plugin)."""

from agent_fsm.scenarios.plugin import pytest_collect_file

# The step watchdog: a spec whose machine cycles without end fails in seconds, it does not hang.
from tests.step_watchdog import pytest_runtest_protocol

__all__ = ["pytest_collect_file", "pytest_runtest_protocol"]
