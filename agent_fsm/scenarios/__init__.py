"""
Executable scenario specs: a TOML file names a world, a task, a model and what must come out.

A spec is data. Every name in it is resolved through a closed mapping: the
environment through an allowlist of module prefixes, the gate, a named model
and the checks through the environment's own tables. Nothing in spec text is
evaluated or imported beyond that, so a spec can be read from anywhere.

The stages are separate so each can be tested and reused:

* :mod:`~agent_fsm.scenarios.format`: :func:`load_scenario` parses and
  validates, raising :class:`SpecFormatError` naming the file and the key;
* :mod:`~agent_fsm.scenarios.runner`: :func:`run_scenario` builds the world
  and the agent (:func:`build_agent`), runs, applies the human decisions
  and evaluates, giving a :class:`ScenarioResult` (each expectation:
  expected, actual, held);
* :mod:`~agent_fsm.scenarios.environment`: :class:`Environment`, what a world
  hands the runner;
* :mod:`~agent_fsm.scenarios.plugin`: the pytest plugin that collects
  ``specs/**/*.toml`` as test items.
"""

from agent_fsm.scenarios.allowed import allowed_packages, project_spec_modules
from agent_fsm.scenarios.environment import Environment
from agent_fsm.scenarios.format import (
    MCPUse,
    ModelSpec,
    Resume,
    Scenario,
    SpecFormatError,
    discover,
    load_scenario,
    scenario_from_data,
)
from agent_fsm.scenarios.runner import (
    ALLOWED_ENVIRONMENT_PREFIXES,
    Expectation,
    ScenarioResult,
    build_agent,
    build_model,
    evaluate_expectations,
    load_environment,
    run_scenario,
)

__all__ = [
    "ALLOWED_ENVIRONMENT_PREFIXES",
    "Environment",
    "Expectation",
    "ModelSpec",
    "MCPUse",
    "Resume",
    "Scenario",
    "ScenarioResult",
    "SpecFormatError",
    "build_agent",
    "build_model",
    "discover",
    "evaluate_expectations",
    "load_environment",
    "load_scenario",
    "allowed_packages",
    "project_spec_modules",
    "run_scenario",
    "scenario_from_data",
]
