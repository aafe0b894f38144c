"""
Against a real llama.cpp ``llama-server`` (opt-in: never in CI, it takes a local build and a model).

Set ``AGENT_FSM_LLAMA_SERVER_URL`` to the server's OpenAI-compatible base URL
(for example ``http://127.0.0.1:8080/v1``) to run these; docs/providers.md says
how to build the server and which small model to load. Without the variable
every test here is skipped.
"""

from __future__ import annotations

import os

import pytest

from agent_fsm import Limits, Stop, ToolSpec, allow_all, run
from agent_fsm.providers import OpenAIChat

URL = os.environ.get("AGENT_FSM_LLAMA_SERVER_URL")
pytestmark = pytest.mark.skipif(not URL, reason="set AGENT_FSM_LLAMA_SERVER_URL to a llama-server's /v1 URL")

TOOLS = {"lookup_order": ToolSpec("Look up an order by its id.", {"order_id": str}, lambda order_id: {"paid": 4999})}


def _model(**options: object) -> OpenAIChat:
    return OpenAIChat(base_url=URL, model=os.environ.get("AGENT_FSM_LLAMA_MODEL", "local"), **options)  # type: ignore[arg-type]


def test_a_run_against_llama_server_ends_typed():
    """Whatever the small model does, the run ends in a typed stop and never in an HTTP 500."""
    result = run("What did order A-17 cost? Use the tool.", _model(), TOOLS, gate=allow_all, limits=Limits(max_turns=3))
    assert isinstance(result.stop, Stop)
    assert result.state.fault is None or result.state.fault.status != 500, result.reason


def test_llama_server_accepts_the_turn_after_malformed_arguments():
    """Broken arguments stay in the transcript; "{}" goes out, which llama-server parses (it 500s on the text)."""
    history = [
        {"role": "user", "content": "What did order A-17 cost?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": false, "kind": "invalid", "content": "not JSON"}'},
    ]
    result = run("Try again.", _model(), TOOLS, gate=allow_all, history=history, limits=Limits(max_turns=2))
    assert result.state.fault is None or result.state.fault.status != 500, result.reason


def test_a_reply_cut_off_by_max_tokens_is_not_an_answer():
    """With max_tokens=1 the server stops at the limit (finish_reason length): answer_rejected, not answered."""
    result = run("Tell me a long story.", _model(extra_body={"max_tokens": 1}), {}, limits=Limits(max_turns=1))
    assert (result.stop, result.state.finish) == (Stop.ANSWER_REJECTED, "length")
