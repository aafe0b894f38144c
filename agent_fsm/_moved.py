"""
Import paths of modules that moved into subpackages in 0.2, kept working for one minor release.

``import agent_fsm.machine`` (and every other path below) still finds the
module at its new home, the very same module object, and warns with a
``DeprecationWarning`` naming the new path. ``agent_fsm.run`` is not listed:
it is the facade's :func:`~agent_fsm.run` function, and the old module's
public names are all on the facade.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED", "install"]

_KERNEL = (
    "analysis", "boundary", "gates", "invariants", "limits", "machine", "models",
    "observe", "policy", "state", "tools", "transcript", "wire",
)  # fmt: skip

MOVED: dict[str, str] = {
    **{f"agent_fsm.{name}": f"agent_fsm.engine.{name}" for name in _KERNEL},
    "agent_fsm.catalog": "agent_fsm.diagrams.catalog",
    "agent_fsm.demo": "agent_fsm.examples.demo",
    "agent_fsm.environment": "agent_fsm.scenarios.environment",
    "agent_fsm.meter": "agent_fsm.patterns.meter",
    "agent_fsm.patterns.compare": "agent_fsm.examples.compare",
    "agent_fsm.scenario": "agent_fsm.scenarios",
    "agent_fsm.scenario_cli": "agent_fsm.cli.run",
    "agent_fsm.spec_plugin": "agent_fsm.scenarios.plugin",
}
"""Old module path -> where the module lives now."""


# Plain classes, not importlib.abc's: that module loads importlib.resources (and tempfile ...) at import.
class _Alias:
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.target}; import it from there", DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """The target module is already executed; nothing to do."""


class _Finder:
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))  # type: ignore[arg-type]  # a Loader by shape


def install() -> None:
    """Answer the old paths (idempotent: one finder per process)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
