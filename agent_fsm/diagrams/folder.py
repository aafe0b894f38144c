"""
The committed ``diagrams/`` folder: every catalog machine, and each catalog agent as configured, in every format.
"""

from __future__ import annotations

from pathlib import Path

from agent_fsm.diagrams.catalog import agents, machines
from agent_fsm.diagrams.composition import composition_dot, composition_mermaid, drawn
from agent_fsm.diagrams.dot import to_dot
from agent_fsm.diagrams.labels import agent_title
from agent_fsm.diagrams.mermaid import to_mermaid
from agent_fsm.engine import RUN_MACHINE, Nested

__all__ = ["write_all"]


def write_all(folder: Path) -> list[Path]:
    """
    Write ``<name>.mmd``, ``<name>.dot`` and ``<name>.svg`` for every machine in the catalog, and
    ``agent-<name>.*`` for every catalog agent: its machine as configured (a nesting agent: each agent's own).

    Returns:
        The files written, in catalog order.

    Raises:
        GraphvizMissing: ``dot`` is not installed (nothing is written then).
    """
    folder.mkdir(parents=True, exist_ok=True)
    texts: dict[str, tuple[str, str]] = {name: (to_mermaid(m), to_dot(m)) for name, m in machines().items()}
    for name, agent in agents().items():
        if any(isinstance(spec.handler, Nested) for spec in agent.tools.values()):
            texts[f"agent-{name}"] = (composition_mermaid(agent), composition_dot(agent))
        else:
            title = agent_title(agent.name, agent.machine(), RUN_MACHINE)
            texts[f"agent-{name}"] = (to_mermaid(agent.machine(), title=title), to_dot(agent.machine(), title=title))
    contents: dict[Path, bytes] = {}
    for name, (mermaid, dot) in texts.items():
        contents[folder / f"{name}.mmd"] = mermaid.encode()
        contents[folder / f"{name}.dot"] = dot.encode()
        contents[folder / f"{name}.svg"] = drawn(dot, "svg")
    for file, data in contents.items():
        file.write_bytes(data)
    return list(contents)
