"""The API reference is complete: every public name of every public package carries its own docstring."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import agent_fsm

PUBLIC = [
    "agent_fsm",
    "agent_fsm.diagrams",
    "agent_fsm.scenarios",
    "agent_fsm.patterns",
    "agent_fsm.providers",
    "agent_fsm.store",
    "agent_fsm.otel",
    "agent_fsm.temporal",
    "agent_fsm.testing",
    "agent_fsm.web",
]


def _attribute_docstrings() -> set[str]:
    """Names assigned at module level and followed by a string: the docstring convention for constants."""
    documented: set[str] = set()
    for path in Path(agent_fsm.__file__).parent.rglob("*.py"):
        body = ast.parse(path.read_text(encoding="utf-8")).body
        for node, after in zip(body, body[1:], strict=False):
            if not (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)):
                continue
            if not isinstance(after.value.value, str):
                continue
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign):
                targets = [node.target]
            else:
                continue
            documented |= {t.id for t in targets if isinstance(t, ast.Name)}
    return documented


def _undocumented(package: str, constants: set[str]) -> list[str]:
    module = importlib.import_module(package)
    missing = []
    for name in module.__all__:
        value = getattr(module, name)
        if inspect.isclass(value):
            doc = value.__dict__.get("__doc__")
        elif inspect.isfunction(value) or inspect.ismodule(value):
            doc = value.__doc__
        else:
            doc = "constant" if name in constants else None
        if not (doc or "").strip():
            missing.append(name)
    return missing


@pytest.mark.parametrize("package", PUBLIC)
def test_every_public_name_is_documented(package: str) -> None:
    """A name in ``__all__`` without a docstring would be a blank entry in the API reference."""
    assert _undocumented(package, _attribute_docstrings()) == []


def test_the_check_sees_a_missing_docstring() -> None:
    """The check is not vacuous: a constant with no docstring is reported."""
    assert "__version__" not in _attribute_docstrings()
