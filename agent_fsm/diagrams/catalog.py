"""
Every machine agent_fsm ships, by name, and the representative agents whose machines the committed diagrams draw.

Diagrams, the static checker and the tests iterate over :func:`machines`;
a renderer asks :func:`ships` whether a machine is one of these (whose
committed drawing says how to regenerate it). :func:`agents` are a few
configurations of one agent (plain, with screens, with a money budget and
compaction, nested with a handoff), drawn as configured so a reader sees
what each option adds. Nothing here draws: the committed ``diagrams/``
folder is written by :mod:`agent_fsm.diagrams.folder`.
"""

from __future__ import annotations

import functools
from decimal import Decimal

from agent_fsm.engine import (
    RUN_MACHINE,
    Agent,
    Ending,
    Limits,
    MachineSpec,
    Observation,
    Price,
    Prices,
    RunState,
    ScriptedModel,
    ToolSpec,
    drop_middle,
)
from agent_fsm.patterns import MACHINES as PATTERN_MACHINES

__all__ = ["agents", "machines", "ships"]


def machines() -> dict[str, MachineSpec]:
    """The shipped machine declarations, the run machine first."""
    found: dict[str, MachineSpec] = {RUN_MACHINE.name: RUN_MACHINE}
    found.update((spec.name, spec) for spec in PATTERN_MACHINES)
    return found


def ships(machine: MachineSpec) -> bool:
    """Whether ``machine`` is one of agent_fsm's own, whose committed diagrams ``--all`` regenerates."""
    return any(machine == ours for ours in machines().values()) or any(
        machine == agent.machine() for agent in agents().values()
    )


def _look_up(order: str) -> dict[str, str]:
    """An effect-free tool: what the order is (drawn, never run)."""
    return {"order": order, "status": "shipped"}


def _refund(order: str) -> dict[str, str]:
    """An effectful tool (drawn, never run)."""
    return {"refunded": order}


def _no_account_numbers(task: str, state: RunState) -> Ending | None:
    """An input screen: a task quoting an account number is refused."""
    return Ending("account_number", "the task quotes an account number") if "IBAN" in task else None


def _no_secrets(observation: Observation, state: RunState) -> Ending | None:
    """A result screen: an observation that shows a key stops the run."""
    return Ending("secret", "a tool showed a key") if "sk-" in str(observation.content) else None


@functools.cache
def agents() -> dict[str, Agent]:
    """
    Representative agents by drawing name: ``plain`` (one effect-free tool, nothing else), ``screens``
    (an input and a result screen), ``cost-compaction`` (a money budget and a compaction) and
    ``nested-handoff`` (an agent as a tool and a handoff). Their models are empty scripts: they are drawn, not run.
    """
    look_up = ToolSpec("Look an order up.", {"order": str}, _look_up)
    refund = ToolSpec("Refund an order.", {"order": str}, _refund, effectful=True)
    plain = Agent(ScriptedModel([]), {"look_up": look_up}, name="plain")
    refunds = Agent(ScriptedModel([]), {"refund": refund}, name="refunds")
    billing = Agent(ScriptedModel([]), {"look_up": look_up}, name="billing")
    return {
        "plain": plain,
        "screens": plain.replace(name="screens", screen_input=_no_account_numbers, screen_result=_no_secrets),
        "cost-compaction": plain.replace(
            name="cost_compaction",
            limits=Limits(max_cost=Decimal("0.05"), max_output_tokens=500),
            prices=Prices(default=Price(Decimal("2.5"), Decimal("10"))),
            compact=drop_middle(),
        ),
        "nested-handoff": Agent(
            ScriptedModel([]),
            {"look_up": look_up, "refunds": refunds.as_tool(), "to_billing": billing.handoff()},
            name="triage",
        ),
    }
