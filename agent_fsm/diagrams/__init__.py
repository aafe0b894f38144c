"""
Diagrams drawn from the live machine declarations, and from the path one run took through them.

Nothing here is drawn by hand: every state and edge comes from a
:class:`~agent_fsm.engine.MachineSpec`, so a diagram cannot disagree
with the engine. The parts, one module each:

* :mod:`~agent_fsm.diagrams.path`: a run's path (:func:`path_of`), read from
  the states it entered or reconstructed from its transcript;
* :mod:`~agent_fsm.diagrams.mermaid`: :func:`to_mermaid`, a Mermaid
  ``stateDiagram-v2`` (renders on GitHub);
* :mod:`~agent_fsm.diagrams.dot`: :func:`to_dot` and :func:`render`, Graphviz
  DOT, and SVG or PNG drawn by the real ``dot`` program;
* :mod:`~agent_fsm.diagrams.sequence`: :func:`sequence_diagram`, one run's
  transcript as a Mermaid ``sequenceDiagram``;
* :mod:`~agent_fsm.diagrams.composition`: an agent with the agents it nests
  (:func:`composition_mermaid` composite states, :func:`composition_dot`
  clusters, :func:`render_composition`), recursion drawn as an edge back,
  each agent's machine as configured (``full=True``: the whole table); and a
  saved run with the runs nested in it, each with its path (:func:`runs_mermaid`,
  :func:`runs_dot`);
* :mod:`~agent_fsm.diagrams.catalog`: the shipped machines (:func:`machines`), and
  representative agents drawn as configured (``catalog.agents()``);
* :mod:`~agent_fsm.diagrams.folder`: :func:`write_all`, which regenerates
  the committed ``diagrams/`` folder from the catalog.

Renderers take a path as ``path=`` and highlight the visited states and the
edges taken, with a count on each. The ``agent-fsm diagram`` command lives in
:mod:`agent_fsm.cli.diagram`.
"""

from agent_fsm.diagrams.catalog import machines
from agent_fsm.diagrams.composition import (
    composition_dot,
    composition_mermaid,
    render_composition,
    runs_dot,
    runs_mermaid,
)
from agent_fsm.diagrams.dot import GraphvizMissing, render, to_dot
from agent_fsm.diagrams.folder import write_all
from agent_fsm.diagrams.labels import REGENERATE_COMMAND
from agent_fsm.diagrams.mermaid import to_mermaid
from agent_fsm.diagrams.path import (
    TRACE_KEY,
    RunPath,
    TraceError,
    load_trace,
    path_of,
    path_on_agent,
    reconstruct_path,
)
from agent_fsm.diagrams.sequence import sequence_diagram

__all__ = [
    "REGENERATE_COMMAND",
    "TRACE_KEY",
    "GraphvizMissing",
    "RunPath",
    "TraceError",
    "composition_dot",
    "composition_mermaid",
    "load_trace",
    "machines",
    "path_of",
    "path_on_agent",
    "reconstruct_path",
    "render",
    "render_composition",
    "runs_dot",
    "runs_mermaid",
    "sequence_diagram",
    "to_dot",
    "to_mermaid",
    "write_all",
]
