"""
Which packages a spec may name as its world: ours, and the ones a user allows.

Rationale: a spec is data that may come from anywhere, so the module it
names is imported only when it lies inside an allowed package. The
examples shipped with agent_fsm are always allowed; a user allows their own
package by name, with ``--allow-module`` on the command line, with
``allowed=`` in :func:`~agent_fsm.scenarios.run_scenario`, or once for a
project in its ``pyproject.toml``::

    [tool.agent_fsm]
    spec-modules = ["bookings.worlds"]
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

from agent_fsm.scenarios.format import SpecFormatError

__all__ = ["ALLOWED_ENVIRONMENT_PREFIXES", "allowed_packages", "project_spec_modules"]

ALLOWED_ENVIRONMENT_PREFIXES: tuple[str, ...] = ("agent_fsm.examples",)
"""Modules a spec's ``environment`` may name: these packages and their submodules, nothing else (unless allowed)."""

_PACKAGE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def allowed_packages(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """
    The built-in packages plus ``extra``, each checked to be a dotted package name.

    Raises:
        ValueError: an entry is not a dotted name (``""`` or ``"*"`` would
            otherwise read as "allow everything").
    """
    found = list(ALLOWED_ENVIRONMENT_PREFIXES)
    for name in extra:
        if not isinstance(name, str) or not _PACKAGE.fullmatch(name):
            raise ValueError(
                f"an allowed spec module must be a dotted package name like 'bookings.worlds', got {name!r}"
            )
        if name not in found:
            found.append(name)
    return tuple(found)


def _pyproject_above(start: Path) -> Path | None:
    here = start.resolve()
    for directory in [here, *here.parents] if here.is_dir() else list(here.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def project_spec_modules(start: str | Path = ".") -> tuple[tuple[str, ...], Path | None]:
    """
    ``[tool.agent_fsm] spec-modules`` of the nearest ``pyproject.toml`` at or above ``start``.

    Returns:
        The module names (empty without a file or a table) and the file read (or ``None``).

    Raises:
        SpecFormatError: the file is not TOML, or ``spec-modules`` is not a list of dotted names.
    """
    path = _pyproject_above(Path(start))
    if path is None:
        return (), None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8", errors="surrogateescape"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SpecFormatError(path, None, f"cannot read it as TOML: {exc}") from exc
    table = data.get("tool", {}).get("agent_fsm", {})
    if not isinstance(table, dict):
        raise SpecFormatError(path, "tool.agent_fsm", f"expected a table, got {type(table).__name__}")
    modules = table.get("spec-modules", [])
    if not isinstance(modules, list) or not all(isinstance(m, str) and _PACKAGE.fullmatch(m) for m in modules):
        raise SpecFormatError(
            path, "tool.agent_fsm.spec-modules", f"expected a list of dotted package names, got {modules!r}"
        )
    return tuple(modules), path
