"""pydantic-graph: ``BaseNode`` subclasses whose return types are the edges; async-native."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from ..record import Record
from ..scenarios import DECLARATIONS, Job, Outcome


@cache
def _pydantic_graph() -> Any:
    # The node classes live in this function so that pydantic-graph stays an
    # optional import; their return annotations (the graph's edges) are
    # resolved from these locals, which is what GraphBuilder.node() reads.
    from pydantic_graph import BaseNode, End, GraphBuilder, GraphRunContext
    from pydantic_graph.step import NodeStep

    Context = GraphRunContext[Record, Job]

    def after_observation(record: Record) -> Propose | End[str]:
        if record.pending:
            return Propose()
        stop = record.budget_stop()
        return Propose() if stop is None else End(record.finish(stop))

    @dataclass
    class Ready(BaseNode[Record, Job, str]):
        """Where a run starts: the budgets are checked on leaving it."""

        async def run(self, ctx: Context) -> Propose | End[str]:
            stop = ctx.state.budget_stop()
            return Propose() if stop is None else End(ctx.state.finish(stop))

    @dataclass
    class Propose(BaseNode[Record, Job, str]):
        """The next proposal is taken (asking the model when the reply is used up) and judged."""

        async def run(self, ctx: Context) -> Execute | Deny | End[str]:
            record = ctx.state
            if not record.pending:
                record.begin_turn()
                record.take_reply(await ctx.deps.model.achat(record.messages, DECLARATIONS))
            if not record.pending:
                return End(record.finish("answered"))
            record.judge_head()
            if record.verdict is None:
                return End(record.finish("tool_limit"))
            kind = record.verdict[0]
            if kind == "allow":
                return Execute()
            if kind == "ask":
                return End(record.finish("awaiting_approval"))
            return Deny()

    @dataclass
    class Execute(BaseNode[Record, Job, str]):
        """One allowed call crosses the effect boundary."""

        async def run(self, ctx: Context) -> Propose | End[str]:
            ctx.state.execute_call()
            return after_observation(ctx.state)

    @dataclass
    class Deny(BaseNode[Record, Job, str]):
        """A rejected proposal's reason goes back to the model."""

        async def run(self, ctx: Context) -> Propose | End[str]:
            ctx.state.record_rejection()
            if ctx.state.denial_repeated():
                return End(ctx.state.finish("no_progress"))
            return after_observation(ctx.state)

    builder = GraphBuilder(state_type=Record, deps_type=Job, input_type=Ready, output_type=str)
    builder.add(
        builder.edge_from(builder.start_node).to(NodeStep(Ready)),
        builder.node(Ready),
        builder.node(Propose),
        builder.node(Execute),
        builder.node(Deny),
    )
    return builder.build(), Ready


async def arun_pydantic_graph(job: Job) -> Outcome:
    graph, ready = _pydantic_graph()
    record = Record(job)
    await graph.run(state=record, deps=job, inputs=ready())
    return record.outcome()
