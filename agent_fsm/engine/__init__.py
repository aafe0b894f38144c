"""
The kernel: the run machine and everything a run needs, with no optional dependency.

Read it in this order: :mod:`~agent_fsm.engine.machine` (the table, one row
per edge), :mod:`~agent_fsm.engine.callbacks` (its guards and effects),
:mod:`~agent_fsm.engine.driver` (``run``, ``resume``, ``advance``),
:mod:`~agent_fsm.engine.boundary` (validate, gate, execute),
:mod:`~agent_fsm.engine.tools` (contracts), :mod:`~agent_fsm.engine.wire`
(message formats), :mod:`~agent_fsm.engine.gates`,
:mod:`~agent_fsm.engine.models`, :mod:`~agent_fsm.engine.state` (the saved
form), :mod:`~agent_fsm.engine.limits`, :mod:`~agent_fsm.engine.observe`,
:mod:`~agent_fsm.engine.invariants` and :mod:`~agent_fsm.engine.analysis`
(the static checker). Applications (diagrams, scenarios, patterns,
providers, the testing kit, the CLI) import the kernel; the kernel never
imports them. Users import from the :mod:`agent_fsm` facade.
"""
