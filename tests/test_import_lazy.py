"""What ``import agent_fsm`` and a plain run leave unloaded: what a plain run never uses is loaded when asked for."""

from __future__ import annotations

import os
import subprocess
import sys

import agent_fsm.engine

# Loaded on first use only: the async runner (and asyncio with it), the decision-policy adapter, the stores,
# nesting (an agent made a tool or a handoff), the static checker (tool rules).
DEFERRED = (
    "asyncio",
    "agent_fsm.engine._async",
    "agent_fsm.engine._policy",
    "agent_fsm.engine._nesting",
    "agent_fsm.engine._analysis",
    "agent_fsm.store",
    "sqlite3",
)
# No schema library for tools declared in the shorthand ({"x": int}).
SCHEMA_LIBRARIES = ("jsonschema", "pydantic", "fastjsonschema", "referencing")
# Standard modules only some paths need: digests and signatures (pauses, intents, signed states), pause ids,
# the format checks of a JSON Schema, typed output. Each is imported by the function that needs it.
ON_DEMAND = ("hashlib", "hmac", "uuid", "ipaddress", "datetime", "urllib.parse", "dataclasses")

PLAIN_RUN = """
import agent_fsm as a
tools = {"add": a.ToolSpec("Add two numbers.", {"x": int, "y": int}, lambda x, y: x + y)}
model = a.ScriptedModel([a.tool_call_message("c1", "add", {"x": 1, "y": 2}), a.answer_message("3")])
assert a.run("add", model, tools, gate=a.allow_all).answer == "3"
"""


def _loaded(code: str, names: tuple[str, ...]) -> set[str]:
    """
    Which of ``names`` (modules, or the top packages of modules) ``code`` brings into ``sys.modules``.

    What the interpreter had loaded before (an editable install's finder loads ``pathlib``, and with it
    ``urllib.parse`` and ``ipaddress``, at start-up) is not counted: ``code`` did not load it.
    """
    probe = (
        f"import sys\nbefore = set(sys.modules)\n{code}\n"
        f"names = {names!r}\n"
        "new = set(sys.modules) - before\n"
        "loaded = new | {m.split('.')[0] for m in new}\n"
        "print(' '.join(sorted(n for n in names if n in loaded)))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_import_and_a_plain_run_load_nothing_deferred() -> None:
    """Neither ``import agent_fsm`` nor a plain run on shorthand tools loads asyncio, the policy adapter or a store."""
    assert _loaded("import agent_fsm", DEFERRED + SCHEMA_LIBRARIES + ON_DEMAND) == set()
    assert _loaded(PLAIN_RUN, DEFERRED + SCHEMA_LIBRARIES + ON_DEMAND) == set()


# A tool declared with a JSON Schema of the common keywords: its definition is checked without jsonschema.
SCHEMA_RUN = """
import agent_fsm as a
from agent_fsm.examples.support_desk import TASK, make_support_desk, refund_gate
schema = {
    "type": "object",
    "description": "a note",
    "properties": {"text": {"type": "string", "minLength": 1, "pattern": "^[a-z ]+$"}, "n": {"type": "integer"}},
    "required": ["text"],
    "additionalProperties": False,
}
note = a.ToolSpec("Take a note.", schema, lambda text, n=0: text)
model = a.ScriptedModel([a.tool_call_message("c1", "note", {"text": "hi"}), a.answer_message("noted")])
assert a.run("note", model, {"note": note}, gate=a.allow_all).answer == "noted"
assert a.run(TASK, a.ScriptedModel([a.answer_message("ok")]), make_support_desk().tools, gate=refund_gate).answer
"""


def test_a_run_on_common_json_schemas_loads_no_schema_library() -> None:
    """Contracts of the common keywords are checked without jsonschema; one keyword beyond them loads it."""
    assert _loaded(SCHEMA_RUN, SCHEMA_LIBRARIES + DEFERRED) == set()
    beyond = SCHEMA_RUN.replace('"n": {"type": "integer"}', '"n": {"type": "integer", "multipleOf": 2}')
    assert beyond != SCHEMA_RUN
    assert _loaded(beyond, SCHEMA_LIBRARIES) == {"jsonschema", "referencing"}


def test_the_paths_that_need_a_standard_module_load_it() -> None:
    """Not vacuous: a signed state, a pause id, a digest, format checks and typed output each load their module."""
    used = (
        "import typing\n"
        "import agent_fsm.engine as e\n"
        "from agent_fsm.engine._boundary import mark_pause\n"
        "from agent_fsm.engine._tools import call_fingerprint\n"
        "s = e.start_state('t')\n"
        "e.RunState.from_json(s.to_json(key=b'k'), key=b'k')\n"
        "s.machine_state = 'AwaitingApproval'\n"
        "mark_pause(s)\n"
        "call_fingerprint(e.ToolCall('c', 'f', {}))\n"
        "spec = e.output_spec({'type': 'object', 'properties': {'d': {'type': 'string', 'format': 'date'},"
        " 'u': {'type': 'string', 'format': 'uri'}}})\n"
        'assert spec.read(\'{"d": "2024-01-02", "u": "http://[::1]/"}\', e.Limits())[0]\n'
        "class Typed(typing.TypedDict):\n    d: str\n"
        "e.output_spec(Typed)\n"
    )
    at_start = _at_start(ON_DEMAND)  # an editable install loads some at start-up: those cannot be seen loading
    assert len(at_start) < len(ON_DEMAND) // 2
    assert _loaded(used, ON_DEMAND) == set(ON_DEMAND) - at_start


def _at_start(names: tuple[str, ...]) -> set[str]:
    """Which of ``names`` a fresh interpreter has loaded before it runs any code."""
    probe = f"import sys\nprint(' '.join(n for n in {names!r} if n in sys.modules))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_the_probe_sees_what_is_asked_for() -> None:
    """Not vacuous: asking for a deferred name loads its module, and the name is the module's own."""
    asked = "import agent_fsm.engine as e\nfrom agent_fsm.engine import DecisionPolicy, named\ne.adrive"
    assert _loaded(asked, DEFERRED) == {"asyncio", "agent_fsm.engine._async", "agent_fsm.engine._policy"}
    assert agent_fsm.engine.DecisionPolicy.__module__ == "agent_fsm.engine._policy"
    assert {"DecisionPolicy", "observations_of", "RunCancelled"} <= set(dir(agent_fsm.engine))


def test_nesting_and_the_checker_load_when_used() -> None:
    """An agent made a tool loads nesting, tool rules load the static checker; the names are the modules' own."""
    agent = PLAIN_RUN.split("assert")[0] + "agent = a.Agent(model, tools, gate=a.allow_all)\n"
    nested = agent + "agent.as_tool('Add.')"
    ruled = agent + "a.Agent(model, tools, gate=a.allow_all, tool_rules=(a.at_most_once('add'),))"
    assert _loaded(nested, DEFERRED) == {"agent_fsm.engine._nesting"}
    assert _loaded(ruled, DEFERRED) == {"agent_fsm.engine._analysis"}
    assert agent_fsm.Nested.__module__ == "agent_fsm.engine._nesting"
    assert agent_fsm.engine.check_machine.__module__ == "agent_fsm.engine._analysis"
    assert {"Nested", "conversation"} <= set(dir(agent_fsm)) & set(dir(agent_fsm.engine))
    assert {"cycles", "MachineReport"} <= set(dir(agent_fsm.engine))
