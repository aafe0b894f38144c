"""
The layout's rules, checked on the source: no import cycles, dependencies pointing one way, modules of one concept.

Imports are read from each module's syntax tree: module-level statements,
including those inside a module-level ``try``/``if``, and imports inside
functions too (an import placed in a function to dodge a cycle is still a
cycle), but not ``if TYPE_CHECKING:`` blocks (never executed).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import agent_fsm
from agent_fsm import engine
from agent_fsm.engine import cycles

PACKAGE = Path(agent_fsm.__file__).parent

# Applications may import the kernel and anything on a lower line; never a higher one.
LAYERS: list[set[str]] = [
    {"engine"},
    {"providers", "testing", "scenarios", "store", "patterns", "otel", "temporal", "mcp", "screens"},
    {"examples"},  # examples.compare meters the patterns on the support-desk example
    {"diagrams"},  # the catalog draws the pattern machines
    {"web"},  # the run viewer draws the run's path; the inbox decides through the store
    {"evals"},  # scores agents over datasets: the kit's cassettes, the scenario format, the viewer's stylesheet
    {"serve"},  # the API reuses the inbox's decision form, its token rules and its server
    {"cli"},
]

# What the kernel may import besides the standard library and itself: its core dependencies.
KERNEL_THIRD_PARTY = {
    "attr",
    "attrs",
    "cattrs",
    "jsonschema",
    "jsonschema_specifications",
    "re2",
    "referencing",
    "transitions",
}

# The kernel's private modules, lowest first: each may import only those before it (see agent_fsm/engine/__init__.py).
KERNEL_LAYERS = [
    "_errors", "_json", "_schema", "_limits", "_endings", "_tools", "_steps", "_machine", "_messages", "_models",
    "_context", "_codecs", "_saved", "_state", "_resting", "_events", "_spending", "_gates", "_boundary",
    "_invariants", "_analysis", "_options", "_run",
    "_launch", "_nesting", "_async", "_agent",
    "_policy",
]  # fmt: skip

# A module holds one concept whole: long is fine, a second concept is not (the cap only catches a drift).
MAX_LINES = 1200


def _is_module(name: str) -> bool:
    if not name.startswith(f"{PACKAGE.name}."):
        return False
    path = PACKAGE.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _module_name(path: Path) -> str:
    parts = [PACKAGE.name, *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(body: list[ast.stmt]) -> Iterator[str]:
    for node in body:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from package import module`` imports that module; ``from module import name`` the module.
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                yield submodule if _is_module(submodule) else node.module
        elif isinstance(node, ast.If):
            test = node.test
            if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                yield from _runtime_imports(node.orelse)
                continue
            yield from _runtime_imports(node.body)
            yield from _runtime_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _runtime_imports(block)


def _local_imports(tree: ast.Module) -> Iterator[str]:
    """Imports inside functions and methods (lazy ones): still arrows in the graph."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in node.body:
                for sub in ast.walk(inner):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        yield from _runtime_imports([sub])


def _graph(local: bool = True) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = set(_runtime_imports(tree.body))
        if local:
            imports |= set(_local_imports(tree))
        graph[_module_name(path)] = imports
    return graph


def _internal(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    return {m: sorted(t for t in targets if t in graph) for m, targets in graph.items()}


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and not parts[1].startswith("_") else "<facade>"


def _layer(area: str) -> int:
    return next(i for i, members in enumerate(LAYERS) if area in members)


def test_no_importcycles() -> None:
    """No module of the package imports itself back, directly or through others, counting imports in functions."""
    assert cycles(_internal(_graph())) == []


def test_cycle_finder_finds_a_planted_cycle() -> None:
    """The check is not vacuous: a cycle planted in the real graph is reported."""
    graph = _internal(_graph())
    graph["agent_fsm.engine._errors"] = [*graph["agent_fsm.engine._errors"], "agent_fsm.engine._state"]
    assert any("agent_fsm.engine._errors" in cycle for cycle in cycles(graph))


def test_a_function_local_import_is_an_arrow() -> None:
    """The graph sees an import placed inside a function (the lazy async runner is one)."""
    assert "agent_fsm.engine._async" in _graph()["agent_fsm.engine._agent"]
    assert "agent_fsm.engine._async" not in _graph(local=False)["agent_fsm.engine._agent"]


def test_the_kernel_is_layered() -> None:
    """Each kernel module imports only kernel modules below it, in the order the engine's docstring lists them."""
    on_disk = sorted(p.stem for p in (PACKAGE / "engine").glob("_*.py") if p.stem != "__init__")
    assert sorted(KERNEL_LAYERS) == on_disk, "place a new kernel module in KERNEL_LAYERS"
    listed = [line.split()[0] for line in (engine.__doc__ or "").splitlines() if line.strip().startswith("_")]
    assert listed == KERNEL_LAYERS, "the engine's docstring lists the modules in their layer order"
    wrong = []
    for module, targets in _internal(_graph()).items():
        if not module.startswith("agent_fsm.engine._"):
            continue
        rank = KERNEL_LAYERS.index(module.rsplit(".", 1)[1])
        for target in targets:
            if target.startswith("agent_fsm.engine.") and KERNEL_LAYERS.index(target.rsplit(".", 1)[1]) >= rank:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_the_kernel_is_at_most_twenty_modules() -> None:
    """The kernel was cut by concept, not by length: a newcomer reads about twenty files, not forty."""
    # About twenty: a concept gets its module. 28: the run state is four (the record, the kinds of saved fields,
    # the saved form derived from them, the compact form a paused state rests in), and which states each option
    # of an agent brings is one (read by the driver and by Agent.machine alike).
    assert len(list((PACKAGE / "engine").glob("_*.py"))) - 1 <= 28


def test_every_area_has_a_layer() -> None:
    """A new subpackage must be placed in LAYERS (that is where its allowed dependencies are decided)."""
    areas = {_area(m) for m in _graph()} - {"<facade>"}
    placed = set().union(*LAYERS)
    assert areas <= placed, f"place {sorted(areas - placed)} in LAYERS"


def test_dependencies_point_one_way() -> None:
    """Applications import the kernel and lower layers, never a higher one; the kernel imports no application."""
    wrong = []
    for module, targets in _internal(_graph()).items():
        source = _area(module)
        for target in targets:
            area = _area(target)
            if area == "<facade>" or source == "<facade>" or area == source:
                continue
            if _layer(area) >= _layer(source):
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_facade_imports_only_the_kernel() -> None:
    """``import agent_fsm`` loads the kernel, not the applications (fast import, no optional dependency)."""
    facade = _graph()["agent_fsm"]
    internal = {t for t in facade if t.startswith("agent_fsm.")}
    assert all(t.startswith("agent_fsm.engine") for t in internal), internal


def test_kernel_imports_only_core_dependencies() -> None:
    """The kernel needs the standard library and its core dependencies only, never an extra."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    wrong = []
    for module, targets in _graph().items():
        if _area(module) != "engine":
            continue
        for target in targets:
            top = target.split(".")[0]
            if top in stdlib or target.startswith("agent_fsm.engine") or top in KERNEL_THIRD_PARTY:
                continue
            wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_no_module_is_too_long() -> None:
    """One concept per module: none grows past MAX_LINES lines."""
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_run_is_the_function_that_delegates_to_agent() -> None:
    """``agent_fsm.run`` is the module-level function beside :class:`agent_fsm.Agent`."""
    assert callable(agent_fsm.run) and agent_fsm.run.__module__ == "agent_fsm.engine._agent"


# Loaded only when something asks for them: a rich schema or a failed call (jsonschema and its
# referencing stack), a pattern (RE2), the testing kit (hypothesis), a provider, the CLI, a drawing, tracing, MCP.
LAZY = (
    "jsonschema",
    "referencing",
    "jsonschema_specifications",
    "re2",
    "hypothesis",
    "httpx",
    "typer",
    "graphviz",
    "starlette",
    "jinja2",
    "uvicorn",
    "opentelemetry",
    "temporalio",
    "mcp",
    "mcp_types",
)


def _loaded_after(code: str) -> set[str]:
    """The LAZY modules in ``sys.modules`` after ``code`` runs in a fresh interpreter."""
    probe = f"import sys\n{code}\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & {set(LAZY)!r})))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


PLAIN_RUN = """
import agent_fsm as a
tools = {"add": a.ToolSpec("Add two numbers.", {"x": int, "y": int}, lambda x, y: x + y)}
model = a.ScriptedModel([a.tool_call_message("c1", "add", {"x": 1, "y": 2}), a.answer_message("3")])
assert a.run("add", model, tools, gate=a.allow_all).answer == "3"
"""


def test_import_loads_no_optional_or_heavy_module() -> None:
    """``import agent_fsm`` and a plain run on shorthand tools stay fast: none of LAZY is loaded."""
    assert _loaded_after("import agent_fsm") == set()
    assert _loaded_after(PLAIN_RUN) == set()


def test_the_cli_loads_no_tracing() -> None:
    """The console script's module loads typer, but never OpenTelemetry (only agent_fsm.otel does)."""
    assert "opentelemetry" not in _loaded_after("import agent_fsm.cli")
    assert "opentelemetry" in _loaded_after("import agent_fsm.otel")


def test_the_lazy_probe_sees_what_a_rich_schema_loads() -> None:
    """The probe is not vacuous: a pattern loads RE2; a keyword beyond the common ones, jsonschema (to check it)."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}}, "required": ["s"]}
    rich = f"import agent_fsm\nagent_fsm.ToolSpec('t', {schema!r}, lambda s: s)"
    assert _loaded_after(rich) == {"re2"}
    richer = rich.replace("'required'", "'minProperties': 1, 'required'")
    assert {"jsonschema", "referencing", "re2"} <= _loaded_after(richer)
