"""Every ``*.toml`` file under specs/ is collected as one test item (see agent_fsm.scenarios.plugin)."""

from agent_fsm.scenarios.plugin import pytest_collect_file

__all__ = ["pytest_collect_file"]
