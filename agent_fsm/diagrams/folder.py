"""
The committed ``diagrams/`` folder: every catalog machine drawn in every format, written in one go.
"""

from __future__ import annotations

from pathlib import Path

from agent_fsm.diagrams.catalog import machines
from agent_fsm.diagrams.dot import render, to_dot
from agent_fsm.diagrams.mermaid import to_mermaid

__all__ = ["write_all"]


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
