"""
What prompt caching saves on a 20-turn run, from recorded usage and the requests the adapters really build.

Not a test: it prints token counts, dollars and ratios. The figures come from
real recorded replies (``tests/providers/fixtures``):

* how much one tool round grows the prompt: Claude's two recorded turns of
  ``anthropic__test_anthropic_tool_output`` (``input_tokens`` 445, then 497);
* how big a first prompt the cache takes, and that the prefix is then served
  from it: ``anthropic__test_anthropic_cache_real_api`` (1,111 tokens read back
  from the cache on the second request);
* OpenAI's cache granularity: ``openai__test_openai_responses_thinking_with_tool_calls``
  (2,048 of 2,087 prompt tokens cached: whole 128-token blocks).

The run: a first prompt of the recorded size, then 19 tool rounds of the
recorded growth. Without caching every request pays its whole prompt. With
``AnthropicMessages(cache=True)`` each request repeats the previous one's
prompt up to a breakpoint (checked below on the 20 request bodies the adapter
builds), so that prefix is read from the cache and only the new round is
written; with OpenAI's ``prompt_cache_key`` the previous prompt is cached in
whole 128-token blocks once it passes 1,024 tokens. Cached tokens are priced
by the engine's :class:`agent_fsm.Price` (``cached_input``); Anthropic's cache
write premium (1.25x input) is shown apart, as the engine does not price it.

    python bench/prompt_caching.py [--turns 20]
"""

from __future__ import annotations

import argparse
import copy
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from agent_fsm import Price
from agent_fsm.providers import AnthropicMessages

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "providers" / "fixtures"
CLAUDE = Price(input=Decimal("3"), output=Decimal("15"), cached_input=Decimal("0.30"))  # claude-sonnet-4-5, per 1M
GPT5 = Price(input=Decimal("1.25"), output=Decimal("10"), cached_input=Decimal("0.125"))  # gpt-5, per 1M
WRITE_PREMIUM = Decimal("0.25")  # Anthropic bills a cache write at 1.25x the input price


def _recording(path: str) -> list[dict[str, Any]]:
    interactions: list[dict[str, Any]] = json.loads((FIXTURES / path).read_text())["interactions"]
    return interactions


def recorded_figures() -> dict[str, int]:
    """The usage figures the bench is built on, read from the recordings."""
    tool_run = _recording("anthropic/anthropic__test_anthropic_tool_output.json")
    cache_run = _recording("anthropic/anthropic__test_anthropic_cache_real_api.json")
    openai_run = _recording("responses/openai__test_openai_responses_thinking_with_tool_calls.json")
    first, second = (i["response"]["body"]["usage"] for i in tool_run)
    cached = cache_run[1]["response"]["body"]["usage"]
    openai_usage = openai_run[1]["response"]["body"]["usage"]
    return {
        "round_growth": second["input_tokens"] - first["input_tokens"],
        "round_output": first["output_tokens"],
        "first_prompt": cached["cache_read_input_tokens"] + cached["input_tokens"],
        "anthropic_cache_read": cached["cache_read_input_tokens"],
        "openai_prompt": openai_usage["input_tokens"],
        "openai_cached": openai_usage["input_tokens_details"]["cached_tokens"],
    }


def _strip(value: Any) -> Any:
    """``value`` without ``cache_control`` marks (they are not part of the cached prefix)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _blocks(body: dict[str, Any]) -> list[tuple[Any, bool]]:
    """A request as Anthropic's cache sees it: tools, system, then every message block; each with its mark."""
    out: list[tuple[Any, bool]] = [(_strip(t), "cache_control" in t) for t in body.get("tools", [])]
    system = body.get("system")
    for block in system if isinstance(system, list) else ([{"text": system}] if system else []):
        out.append((_strip(block), "cache_control" in block))
    for message in body["messages"]:
        for block in message["content"]:
            out.append(((message["role"], _strip(block)), "cache_control" in block))
    return out


def breakpoint_hits(turns: int) -> int:
    """
    Of ``turns`` requests the adapter builds for a growing run, how many repeat the previous one's whole marked
    prefix at a breakpoint of their own (the condition for Anthropic to serve all of it from the cache).
    """
    recording = _recording("anthropic/anthropic__test_anthropic_tool_output.json")
    call = recording[0]["response"]["body"]["content"][0]
    tools = [
        {"type": "function", "function": {"name": t["name"], "description": "", "parameters": t["input_schema"]}}
        for t in recording[0]["request"]["body"]["tools"]
    ]
    model = AnthropicMessages(model="claude-sonnet-4-5", base_url="http://127.0.0.1:9", cache=True)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": recording[0]["request"]["body"]["messages"][0]["content"][0]["text"]},
    ]
    longest = None  # the previous request's whole marked prefix: what it wrote to the cache last
    hits = 0
    for turn in range(turns):
        blocks = _blocks(model.request_body(messages, tools))
        prefixes = [json.dumps([b for b, _ in blocks[: i + 1]]) for i, (_, marked) in enumerate(blocks) if marked]
        hits += longest in prefixes
        longest = prefixes[-1] if prefixes else None
        ident = f"toolu_{turn:04d}"
        wire = {
            "id": ident,
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["input"])},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [copy.deepcopy(wire)]})
        messages.append({"role": "tool", "tool_call_id": ident, "content": "Mexico"})
    return hits


def anthropic_costs(figures: dict[str, int], turns: int, hits: int) -> dict[str, Decimal | int]:
    """The run's cost without caching and with it, ``hits`` later requests reading the previous prompt back."""
    prompts = [figures["first_prompt"] + n * figures["round_growth"] for n in range(turns)]
    output = figures["round_output"]
    plain = sum((CLAUDE.cost(p, output) for p in prompts), Decimal(0))
    cached = [0] + [p if n < hits else 0 for n, p in enumerate(prompts[:-1])]
    with_cache = sum((CLAUDE.cost(p, output, c) for p, c in zip(prompts, cached, strict=True)), Decimal(0))
    written = sum(p - c for p, c in zip(prompts, cached, strict=True))
    premium = written * CLAUDE.input * WRITE_PREMIUM / Decimal(1_000_000)
    return {
        "prompt_tokens": sum(prompts),
        "cached_tokens": sum(cached),
        "plain": plain,
        "cached": with_cache,
        "cached_with_writes": with_cache + premium,
    }


def openai_costs(figures: dict[str, int], turns: int) -> dict[str, Decimal | int]:
    """The run's cost without caching and with OpenAI's: the previous prompt in whole 128-token blocks, past 1,024."""
    prompts = [figures["first_prompt"] + n * figures["round_growth"] for n in range(turns)]
    output = figures["round_output"]
    cached = [0] + [p // 128 * 128 if p >= 1024 else 0 for p in prompts[:-1]]
    plain = sum((GPT5.cost(p, output) for p in prompts), Decimal(0))
    with_cache = sum((GPT5.cost(p, output, c) for p, c in zip(prompts, cached, strict=True)), Decimal(0))
    return {"prompt_tokens": sum(prompts), "cached_tokens": sum(cached), "plain": plain, "cached": with_cache}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--turns", type=int, default=20)
    turns = parser.parse_args().turns
    figures = recorded_figures()
    print("recorded:", ", ".join(f"{k}={v}" for k, v in figures.items()))
    print(
        f"OpenAI's recorded cache: {figures['openai_cached']} of {figures['openai_prompt']} prompt tokens"
        f" ({figures['openai_cached'] // 128} whole 128-token blocks)"
    )
    hits = breakpoint_hits(turns)
    print(f"AnthropicMessages(cache=True): {hits} of {turns - 1} later requests repeat the last prefix at a breakpoint")
    a = anthropic_costs(figures, turns, hits)
    print(
        f"Anthropic, {turns} turns: {a['prompt_tokens']} prompt tokens, {a['cached_tokens']} read from the cache;"
        f" ${a['plain']:.4f} without caching, ${a['cached']:.4f} with it"
        f" (${a['cached_with_writes']:.4f} with the write premium): "
        f"{a['plain'] / a['cached']:.2f}x cheaper ({a['plain'] / a['cached_with_writes']:.2f}x with writes)"
    )
    o = openai_costs(figures, turns)
    print(
        f"OpenAI (prompt_cache_key), {turns} turns: {o['cached_tokens']} of {o['prompt_tokens']} prompt tokens cached;"
        f" ${o['plain']:.4f} without caching, ${o['cached']:.4f} with it: {o['plain'] / o['cached']:.2f}x cheaper"
    )


if __name__ == "__main__":
    main()
