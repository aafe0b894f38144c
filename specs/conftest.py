"""Every ``*.toml`` file under specs/ is collected as one test item (see agent_fsm.scenarios.plugin)."""

from agent_fsm.scenarios.plugin import pytest_collect_file
from tests.step_watchdog import step_watchdog  # a spec whose machine cycles without end fails, it does not hang

__all__ = ["pytest_collect_file", "step_watchdog"]
