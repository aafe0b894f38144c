"""
Every machine agent_fsm ships, by name.

Diagrams, the static checker and the tests iterate over :func:`machines`;
a renderer asks :func:`ships` whether a machine is one of these (whose
committed drawing says how to regenerate it). Nothing here draws: the
committed ``diagrams/`` folder is written by :mod:`agent_fsm.diagrams.folder`.
"""

from __future__ import annotations

from agent_fsm.engine import RUN_MACHINE, MachineSpec
from agent_fsm.patterns import MACHINES as PATTERN_MACHINES

__all__ = ["machines", "ships"]


def machines() -> dict[str, MachineSpec]:
    """The shipped machine declarations, the run machine first."""
    found: dict[str, MachineSpec] = {RUN_MACHINE.name: RUN_MACHINE}
    found.update((spec.name, spec) for spec in PATTERN_MACHINES)
    return found


def ships(machine: MachineSpec) -> bool:
    """Whether ``machine`` is one of agent_fsm's own, whose committed diagrams ``--all`` regenerates."""
    return any(machine == ours for ours in machines().values())
