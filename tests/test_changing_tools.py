"""A registry whose list changes during a run (one with a ``version``): shown to the model from the next turn on."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from agent_fsm import Agent, Limits, Stop, ToolSpec, allow_all, answer_message, tool_call_message


class Shelf(Mapping[str, ToolSpec]):
    """A registry that grows when ``unlock`` runs: its version moves with its contents."""

    def __init__(self, extra_description: str = "Restock an item.") -> None:
        self.version = 0
        self.extra_description = extra_description
        self.specs = {"unlock": ToolSpec("Unlock the back room.", {}, self.unlock)}

    def unlock(self) -> str:
        self.specs["restock"] = ToolSpec(self.extra_description, {"item": str}, lambda item: f"restocked {item}")
        self.version += 1
        return "unlocked"

    def __getitem__(self, name: str) -> ToolSpec:
        return self.specs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)


class Noting:
    """Unlocks, restocks if it was shown the tool, then answers; notes the tools shown at each call."""

    def __init__(self) -> None:
        self.shown: list[list[str]] = []

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        self.shown.append([t["function"]["name"] for t in tools])
        if len(self.shown) == 1:
            return tool_call_message("c1", "unlock", {})
        if len(self.shown) == 2 and "restock" in self.shown[-1]:
            return tool_call_message("c2", "restock", {"item": "flour"})
        return answer_message("done")


def test_a_tool_added_mid_run_is_shown_at_the_next_turn_and_runs() -> None:
    """The model sees the new tool at its next call; the call to it is validated and judged like any other."""
    model = Noting()
    result = Agent(model, Shelf(), gate=allow_all).run("restock")
    assert model.shown == [["unlock"], ["unlock", "restock"], ["unlock", "restock"]]
    assert [o.content for o in result.state.observations] == ["unlocked", "restocked flour"]


def test_the_token_budget_counts_the_new_declarations_before_the_next_call() -> None:
    """A newcomer too large for the prompt budget ends the run at TokenLimit before the model is asked again."""
    small = Agent(Noting(), Shelf(), gate=allow_all).run("restock")
    second_prompt = small.state.prompt_token_log[1]
    large = Shelf(extra_description="Restock an item. " + "Mind the shelf labels. " * 200)
    model = Noting()
    limits = Limits(max_prompt_tokens=second_prompt + 100)
    result = Agent(model, large, gate=allow_all, limits=limits).run("restock")
    assert result.stop is Stop.TOKEN_LIMIT and len(model.shown) == 1


def test_a_registry_without_a_version_is_shown_as_it_was_when_the_run_began() -> None:
    """A plain dict changed by a handler is not followed: the model is shown what the run began with."""
    shelf = Shelf()
    plain = dict(shelf)
    plain["unlock"] = ToolSpec("Unlock.", {}, lambda: plain.setdefault("restock", shelf.specs["unlock"]) and "ok")
    model = Noting()
    Agent(model, plain, gate=allow_all).run("restock")
    assert model.shown[1] == ["unlock"]
