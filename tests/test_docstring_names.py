"""Docstrings and comments name only modules, and names in them, that exist: a re-cut leaves no stale pointer behind."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agent_fsm"
DOTTED = re.compile(r"\bagent_fsm(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _module_file(name: str) -> Path | None:
    """The file of the dotted module ``name``, or ``None`` if there is none."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@cache
def _top_level_names(path: Path) -> frozenset[str]:
    """What a module defines or imports at its top level (and, for a package, its submodules)."""
    names: set[str] = set()
    body = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while body:
        node = body.pop()
        if isinstance(node, ast.If | ast.Try):  # names imported under TYPE_CHECKING, or as a fallback
            body.extend(
                [*node.body, *getattr(node, "orelse", []), *(h for x in getattr(node, "handlers", []) for h in x.body)]
            )
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                names.update(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant))  # lazy exports
    if path.name == "__init__.py":
        names.update(p.stem for p in path.parent.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file())
    return frozenset(names)


def dangling(reference: str) -> bool:
    """Whether a dotted ``reference`` names nothing: past its longest existing module, the next name is not there."""
    parts = reference.split(".")
    for cut in range(len(parts), 0, -1):
        found = _module_file(".".join(parts[:cut]))
        if found is not None:
            return cut < len(parts) and parts[cut] not in _top_level_names(found)
    return True


def _prose(source: str) -> list[tuple[int, str]]:
    """Each line of the docstrings (any string standing as a statement) and comments of ``source``, numbered."""
    lines: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            lines.extend((node.lineno + i, text) for i, text in enumerate(node.value.value.splitlines()))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            lines.append((token.start[0], token.string))
    return lines


NOT_PYTHON = frozenset({"agent_fsm.screened", "agent_fsm.stop"})
"""Dotted names that are not Python's: OpenTelemetry attribute and event names the sink writes."""


def stale_references(paths: list[Path]) -> list[str]:
    """Every ``file:line: name`` where a docstring or comment names an ``agent_fsm`` module or name not there."""
    found = []
    for path in paths:
        for line, text in _prose(path.read_text(encoding="utf-8")):
            for reference in DOTTED.findall(text):
                if reference not in NOT_PYTHON and dangling(reference):
                    found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}: {reference}")
    return found


def test_docstrings_name_only_modules_that_exist() -> None:
    """No docstring or comment in agent_fsm/, tests/ or bench/ points at a module (or a name in one) that is gone."""
    paths = sorted(p for folder in ("agent_fsm", "tests", "bench") for p in (ROOT / folder).rglob("*.py"))
    stale = stale_references(paths)
    assert not stale, "names that no longer exist:\n" + "\n".join(stale)


def test_the_check_sees_a_removed_module_and_a_removed_name(tmp_path: Path) -> None:
    """The check itself: a gone module, a gone name in a real module and a gone submodule are caught; real ones pass."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""See :mod:`agent_fsm.engine.callbacks` and :func:`agent_fsm.engine._run.no_such_effect`."""\n'
        "# the screens live in agent_fsm.engine._screens\n"
        "X = 1  # agent_fsm.engine._run.execute_call and agent_fsm.store.SqliteStore are real\n"
        '"""agent_fsm.Agent.run is a method; agent_fsm.engine.MachineSpec is re-exported."""\n',
        encoding="utf-8",
    )
    assert [entry.split(": ", 1)[1] for entry in stale_references([sample])] == [
        "agent_fsm.engine.callbacks",
        "agent_fsm.engine._run.no_such_effect",
        "agent_fsm.engine._screens",
    ]
