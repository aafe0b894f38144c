"""
Every machine agent_fsm ships, by name, and the committed ``diagrams/`` folder drawn from them.

Diagrams, the static checker and the tests iterate over :func:`machines`;
:func:`write_all` regenerates the folder that the drift test compares.
"""

from __future__ import annotations

from pathlib import Path

from agent_fsm.diagrams.dot import render, to_dot
from agent_fsm.diagrams.mermaid import to_mermaid
from agent_fsm.engine import RUN_MACHINE, MachineSpec
from agent_fsm.patterns import MACHINES as PATTERN_MACHINES

__all__ = ["machines", "write_all"]


def machines() -> dict[str, MachineSpec]:
    """The shipped machine declarations, the run machine first."""
    found: dict[str, MachineSpec] = {RUN_MACHINE.name: RUN_MACHINE}
    found.update((spec.name, spec) for spec in PATTERN_MACHINES)
    return found


def write_all(folder: Path) -> list[Path]:
    """
    Write ``<name>.mmd``, ``<name>.dot`` and ``<name>.svg`` for every machine in the catalog.

    Returns:
        The files written, in catalog order.

    Raises:
        GraphvizMissing: ``dot`` is not installed (nothing is written then).
    """
    folder.mkdir(parents=True, exist_ok=True)
    contents: dict[Path, bytes] = {}
    for name, machine in machines().items():
        contents[folder / f"{name}.mmd"] = to_mermaid(machine).encode()
        contents[folder / f"{name}.dot"] = to_dot(machine).encode()
        contents[folder / f"{name}.svg"] = render(machine, "svg")
    for file, data in contents.items():
        file.write_bytes(data)
    return list(contents)
