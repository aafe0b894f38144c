"""
The workflow canon as machines over one kernel (chain, router, fan-out, evaluator, agent), and a plan executor.

Each pattern is a small :class:`agent_fsm.MachineSpec` driven like the run
machine, and each differs from the others only in what decides the next
move. They share the effect boundary (every tool call goes through
:func:`agent_fsm.attempt`, validation then the gate then the handler) and
the accounting (:class:`agent_fsm.patterns.meter.Meter`), so their costs can be
compared fairly: ``agent-fsm compare`` runs all five, and the plan
executor (:func:`plan_and_execute`), on one task.

Endings: the workflows report a :class:`PatternEnding`; the adaptive agent reports
the run machine's :class:`agent_fsm.Stop`. ``PatternEnding.PROVIDER_ERROR`` and
``Stop.PROVIDER_ERROR`` mean the same and share a value.
"""

from agent_fsm.patterns._common import (
    PatternEnding,
    PatternResult,
    Plan,
    Results,
    ScriptedReplies,
    Step,
)
from agent_fsm.patterns.agent import AGENT_MACHINE, agent, resume_agent
from agent_fsm.patterns.chain import CHAIN_MACHINE, chain
from agent_fsm.patterns.evaluator import EVALUATOR_MACHINE, Criterion, evaluator
from agent_fsm.patterns.meter import Meter, Spend
from agent_fsm.patterns.parallel import PARALLEL_MACHINE, aparallel, parallel
from agent_fsm.patterns.plan import PLAN_MACHINE, parse_plan, plan_and_execute, plan_prompt
from agent_fsm.patterns.router import ROUTER_MACHINE, route_prompt, router

__all__ = [
    # Patterns
    "chain",
    "router",
    "parallel",
    "aparallel",
    "evaluator",
    "agent",
    "resume_agent",
    "plan_and_execute",
    # Their parts
    "Plan",
    "Step",
    "Results",
    "Criterion",
    "route_prompt",
    "plan_prompt",
    "parse_plan",
    "ScriptedReplies",
    "PatternEnding",
    "PatternResult",
    "Meter",
    "Spend",
    # Their machines
    "CHAIN_MACHINE",
    "ROUTER_MACHINE",
    "PARALLEL_MACHINE",
    "EVALUATOR_MACHINE",
    "AGENT_MACHINE",
    "PLAN_MACHINE",
    "MACHINES",
]

MACHINES = (CHAIN_MACHINE, ROUTER_MACHINE, PARALLEL_MACHINE, EVALUATOR_MACHINE, AGENT_MACHINE, PLAN_MACHINE)
"""Every pattern's declaration, in the order of the canon, then the plan executor."""
