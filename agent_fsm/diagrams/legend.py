"""
What each option of an agent adds to the run machine, as a Markdown table: the legend beside the whole table.

Read from :data:`agent_fsm.RUN_OPTIONS`, the list the driver and
:meth:`agent_fsm.Agent.machine` restrict the table by, so the legend cannot
disagree with either: the core is the machine with no option taken; each row
is what one option alone adds to it. A new option is a new row of that list,
and of this table, with no change here.
"""

from __future__ import annotations

from agent_fsm.engine import RUN_MACHINE, RUN_OPTIONS, Edge, MachineSpec

__all__ = ["core_machine", "option_legend"]


def core_machine() -> MachineSpec:
    """The run machine with no option taken: what every agent can do."""
    return RUN_MACHINE.without({guard for option in RUN_OPTIONS for guard in option.guards})


def _edge(edge: Edge) -> str:
    return f"{edge.source} → {edge.dest}" + (f" `[{edge.guard}]`" if edge.guard else "")


def option_legend(*, edges: bool = False) -> str:
    """
    A Markdown table: each option, what a user writes to take it, the states it brings and its edges
    (a count and the guards that open them; ``edges=True``: every edge), then the edges only two options
    together bring.
    """
    every = {guard for option in RUN_OPTIONS for guard in option.guards}
    core = core_machine()
    rows = [
        "| option | you write | states it brings | edges it brings |",
        "|---|---|---|---|",
    ]
    alone: set[Edge] = set(core.edges)
    for option in RUN_OPTIONS:
        taken = RUN_MACHINE.without(every - set(option.guards))
        states = ", ".join(s.name for s in taken.states if s not in core.states) or "none"
        added = [e for e in taken.edges if e not in core.edges]
        alone |= set(added)
        if edges:
            listed = "; ".join(_edge(e) for e in added)
        else:
            listed = f"{len(added)}: " + ", ".join(f"`{g}`" for g in option.guards)
        rows.append(f"| {option.name} | `{option.given_by}` | {states} | {listed} |")
    together = [e for e in RUN_MACHINE.edges if e not in alone]
    text = "\n".join(rows) + "\n"
    if together:
        text += "\nOnly options taken together bring " + "; ".join(_edge(e) for e in together) + ".\n"
    return text
