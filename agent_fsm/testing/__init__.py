"""
agent_fsm.testing: property-test your own gates, models and run loops against the engine's invariants.

* strategies named for what they generate: :func:`assistant_messages`,
  :func:`scripted_models`, :func:`tool_arguments`, :func:`limits`, :func:`gates`, ...;
* :func:`assert_run_invariants`, which raises :class:`InvariantViolation`
  naming the invariant and the message it broke at;
* one-call checks that run Hypothesis themselves: :func:`check_gate_contains`,
  :func:`check_policy_ends`, :func:`check_driver`;
* :class:`RunHarness`, a ``RuleBasedStateMachine`` that chooses each reply
  and each human decision, checking the invariants after every step;
* :class:`ManualClock`, a clock for ``Agent(clock=...)``: time budgets tested without sleeping;
* :func:`drive_machine` and :func:`check_machine_terminates`: a watchdog and
  a ranking-function check along the paths a machine really takes;
* :class:`Coverage`, which every check returns (``report=True`` prints it):
  the edges, verdicts, tools and argument boundaries its runs exercised;
* :func:`paths_to`, :func:`routes` and :func:`check_reaches_all`: the
  shortest route to each state, and runs in your world that take it;
* :class:`RecordingModel`, :class:`ReplayModel` and :func:`perturbed_runs`:
  real runs on cassettes (plain JSON, secrets redacted), replayed and moved a little;
* :func:`injection_payloads`, :func:`planted_results` and :func:`check_screen`:
  tool results with a payload planted in them, and the check that a result
  screen never lets the model be shown what you mark;
* :func:`check_parallel_calls`, :func:`assert_answer_held` and :func:`assert_rate_kept`:
  calls run together as one by one, an answer held until accepted, a rate limit kept;
* :func:`nested_worlds`, :func:`drive_nested` and :func:`assert_nested_invariants`
  (or :func:`check_nesting` in one call): agents run as tools of agents, to a
  depth, under random scripts, gates, budgets and a person's decisions.

See ``docs/testing.md``. The kit needs Hypothesis, which the core package does
not install: ``pip install "agent_fsm[testing]"``.
"""

# ruff: noqa: E402  (the check below must run before any module that imports hypothesis)

try:
    import hypothesis as _hypothesis
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "agent_fsm.testing needs the 'testing' extra (hypothesis, pytest), which is not installed: "
        'pip install "agent_fsm[testing]"'
    ) from exc
del _hypothesis

from agent_fsm.testing._cassettes import (
    CASSETTE_FORMAT,
    NotRecorded,
    Perturbation,
    RecordingModel,
    ReplayModel,
    load_cassette,
    perturbed_runs,
    redact,
)
from agent_fsm.testing._checks import check_driver, check_gate_contains, check_policy_ends
from agent_fsm.testing._constants import constants_of, gate_constants
from agent_fsm.testing._coverage import Coverage
from agent_fsm.testing._drive import (
    CANCEL,
    DEFAULT_TASK,
    Driver,
    GateContext,
    ManualClock,
    Outcome,
    World,
    describe_run,
    drive,
    world_of,
)
from agent_fsm.testing._enumeration import MAX_CASES, contract_cases
from agent_fsm.testing._harness import RunHarness, run_harness
from agent_fsm.testing._invariants import (
    INVARIANTS,
    CallMatch,
    InvariantViolation,
    assert_nothing_forbidden,
    assert_run_invariants,
    by_call,
    executed_calls,
)
from agent_fsm.testing._nested import (
    NESTED_INVARIANTS,
    NestedDecision,
    NestedOutcome,
    NestedWorld,
    assert_nested_invariants,
    check_nesting,
    drive_nested,
    level_tools,
    nested_world,
    nested_worlds,
)
from agent_fsm.testing._paths import PROVIDER_DOWN, Route, RouteModel, check_reaches_all, paths_to, routes
from agent_fsm.testing._runloop import (
    assert_answer_held,
    assert_rate_kept,
    assert_same_run,
    check_parallel_calls,
    most_in_window,
    parallel_call_messages,
)
from agent_fsm.testing._schema import (
    UnsupportedSchema,
    schema_values,
    schema_violations,
)
from agent_fsm.testing._screening import INJECTION_ACTION, check_screen, injection_payloads, planted_results
from agent_fsm.testing._settings import default_settings
from agent_fsm.testing._strategies import (
    MESSAGE_KINDS,
    FailingModel,
    TableGate,
    answer_messages,
    answers,
    assistant_messages,
    capped_tools,
    compactors,
    fallback_models,
    files,
    gates,
    images,
    invalid_answers,
    invalid_arguments,
    limits,
    prices,
    register_type_strategies,
    reported_replies,
    scripted_models,
    scripts,
    tasks,
    thoughts,
    tool_arguments,
    tool_calls,
    tool_results,
    tool_rule_sets,
    verdicts,
)
from agent_fsm.testing._termination import check_machine_terminates, drive_machine, transition_bound
from agent_fsm.testing._watchdog import watchdog_calls

__all__ = [
    # Strategies
    "MESSAGE_KINDS",
    "FailingModel",
    "TableGate",
    "capped_tools",
    "fallback_models",
    "prices",
    "reported_replies",
    "answer_messages",
    "compactors",
    "tool_rule_sets",
    "constants_of",
    "contract_cases",
    "gate_constants",
    "MAX_CASES",
    "assistant_messages",
    "gates",
    "answers",
    "invalid_answers",
    "invalid_arguments",
    "limits",
    "register_type_strategies",
    "schema_values",
    "schema_violations",
    "scripted_models",
    "scripts",
    "tasks",
    "images",
    "files",
    "tool_results",
    "thoughts",
    "tool_arguments",
    "tool_calls",
    "verdicts",
    "UnsupportedSchema",
    # Invariants
    "INVARIANTS",
    "InvariantViolation",
    "assert_nothing_forbidden",
    "assert_run_invariants",
    "executed_calls",
    "CallMatch",
    "by_call",
    # Driving runs and one-call checks
    "CANCEL",
    "DEFAULT_TASK",
    "Driver",
    "Outcome",
    "GateContext",
    "ManualClock",
    "World",
    "check_driver",
    "check_gate_contains",
    "check_policy_ends",
    "default_settings",
    "describe_run",
    "drive",
    "watchdog_calls",
    "world_of",
    # Coverage and shortest paths
    "Coverage",
    "PROVIDER_DOWN",
    "Route",
    "RouteModel",
    "check_reaches_all",
    "paths_to",
    "routes",
    # Real runs as tests
    "CASSETTE_FORMAT",
    "NotRecorded",
    "Perturbation",
    "RecordingModel",
    "ReplayModel",
    "load_cassette",
    "perturbed_runs",
    "redact",
    # Screens under attack
    "INJECTION_ACTION",
    "check_screen",
    "injection_payloads",
    "planted_results",
    # Agents nested in agents
    "NESTED_INVARIANTS",
    "NestedDecision",
    "NestedOutcome",
    "NestedWorld",
    "assert_nested_invariants",
    "check_nesting",
    "drive_nested",
    "level_tools",
    "nested_world",
    "nested_worlds",
    # The run loop's options: parallel calls, a held answer, a rate limit
    "assert_answer_held",
    "assert_rate_kept",
    "assert_same_run",
    "check_parallel_calls",
    "most_in_window",
    "parallel_call_messages",
    # Stateful harness
    "RunHarness",
    "run_harness",
    # Termination on the paths runs take
    "check_machine_terminates",
    "drive_machine",
    "transition_bound",
]
