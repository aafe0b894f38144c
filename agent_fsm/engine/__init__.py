"""
The kernel: the run machine and everything a run needs, with no optional dependency.

Users import from the :mod:`agent_fsm` facade; this map is for readers.
Applications (diagrams, scenarios, patterns, providers, store, the testing
kit, the CLI) import the kernel; the kernel never imports them.

The machine and its run
    :mod:`~agent_fsm.engine.machine` (the table, one row per edge),
    :mod:`~agent_fsm.engine.compiled` (the shared ``transitions`` machine),
    :mod:`~agent_fsm.engine.callbacks` (guards and effects),
    :mod:`~agent_fsm.engine.context` (one run in flight),
    :mod:`~agent_fsm.engine.steps` (where a run waits; the sync runner),
    :mod:`~agent_fsm.engine.async_steps` (the async runner),
    :mod:`~agent_fsm.engine.launch` (how a run starts and rests),
    :mod:`~agent_fsm.engine.driver` (``run``, ``resume``, ``advance``, ``stream``),
    :mod:`~agent_fsm.engine.async_driver` (``arun``, ``aresume``, ``aadvance``, ``astream``),
    :mod:`~agent_fsm.engine.events` (run events as plain data),
    :mod:`~agent_fsm.engine.limits`, :mod:`~agent_fsm.engine.progress`
    (no-progress bookkeeping), :mod:`~agent_fsm.engine.endings` (a world's codes).
The effect boundary
    :mod:`~agent_fsm.engine.boundary` (validate, gate, execute),
    :mod:`~agent_fsm.engine.gates`, :mod:`~agent_fsm.engine.approval`
    (what a human approval covers), :mod:`~agent_fsm.engine.effects` (effect
    log to call).
Contracts and hostile input
    :mod:`~agent_fsm.engine.tools`, :mod:`~agent_fsm.engine.schema`,
    :mod:`~agent_fsm.engine.regexes`, :mod:`~agent_fsm.engine.formats`,
    :mod:`~agent_fsm.engine.jsondata`, :mod:`~agent_fsm.engine.handlers`.
Models and messages
    :mod:`~agent_fsm.engine.models`, :mod:`~agent_fsm.engine.wire`,
    :mod:`~agent_fsm.engine.policy`, :mod:`~agent_fsm.engine.observe`,
    :mod:`~agent_fsm.engine.transcript`.
State that leaves memory
    :mod:`~agent_fsm.engine.state`, :mod:`~agent_fsm.engine.saved`,
    :mod:`~agent_fsm.engine.state_reader`, :mod:`~agent_fsm.engine.state_fast_reader`,
    :mod:`~agent_fsm.engine.consistency`,
    :mod:`~agent_fsm.engine.checkpoint`, :mod:`~agent_fsm.engine.durable`,
    :mod:`~agent_fsm.engine.recovery`.
Checks and errors
    :mod:`~agent_fsm.engine.invariants`, :mod:`~agent_fsm.engine.analysis`
    (the static checker), :mod:`~agent_fsm.engine.errors`,
    :mod:`~agent_fsm.engine.failures`.
"""
