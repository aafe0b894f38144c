"""
Every machine agent_fsm ships, by name: what diagrams, the static checker and tests iterate over.
"""

from __future__ import annotations

from .machine import RUN_MACHINE, MachineSpec
from .patterns import MACHINES as PATTERN_MACHINES

__all__ = ["machines"]


def machines() -> dict[str, MachineSpec]:
    """The shipped machine declarations, the run machine first."""
    found: dict[str, MachineSpec] = {RUN_MACHINE.name: RUN_MACHINE}
    found.update((spec.name, spec) for spec in PATTERN_MACHINES)
    return found
