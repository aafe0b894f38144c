"""
The kit's pytest plugin: ``--agent-fsm-coverage`` prints what every check exercised.

Enable it with ``-p agent_fsm.testing.plugin`` on the command line, or
``pytest_plugins = ["agent_fsm.testing.plugin"]`` in a ``conftest.py``. With
the option, each check of :mod:`agent_fsm.testing` (and
:func:`agent_fsm.testing.check_reaches_all`) keeps its coverage report, and
the terminal summary lists them by test. The kit is imported only when the
option is given, so the plugin costs nothing otherwise.
"""

from __future__ import annotations

import pytest

__all__ = ["pytest_addoption", "pytest_configure", "pytest_terminal_summary", "pytest_unconfigure"]

OPTION = "--agent-fsm-coverage"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("agent_fsm").addoption(
        OPTION,
        action="store_true",
        default=False,
        help="print the coverage of every agent_fsm.testing check: edges, verdicts, tools, argument boundaries",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption(OPTION):
        from agent_fsm.testing._coverage import collect_reports

        collect_reports(True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if not config.getoption(OPTION):
        return
    from agent_fsm.testing._coverage import collected_reports

    reports = collected_reports()
    terminalreporter.section("agent_fsm coverage")
    if not reports:
        terminalreporter.write_line("no agent_fsm.testing check ran")
    for test, report in reports:
        terminalreporter.write_line(test)
        for line in report.splitlines():
            terminalreporter.write_line("  " + line)


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.getoption(OPTION):
        from agent_fsm.testing._coverage import collect_reports

        collect_reports(False)
