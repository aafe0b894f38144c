"""Every ``*.toml`` file under specs/ is collected as one test item (see agent_fsm.spec_plugin)."""

from agent_fsm.spec_plugin import pytest_collect_file

__all__ = ["pytest_collect_file"]
