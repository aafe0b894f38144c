"""
How the adapters' token estimates of a tool's image or PDF compare with what the providers counted.

Not a test: it prints, for each recorded conversation where a tool returned an
image or a PDF (``tests/providers/fixtures/tool_media``, origins in ``SOURCES.md``),
the growth of the recorded prompt between the request before the result and the
request carrying it (the provider's own count: the model's call and the result),
beside the adapter's ``estimator`` over the same two messages of a run replayed
from 127.0.0.1, and their ratio. A ratio above 1 is an estimate that errs on the
side of the prompt budget, one below 1 a prompt the estimate undercounts.
Gemini's call message is estimated with its thought signatures, sent back as
text; what Gemini counts for them is its own.

    PYTHONPATH=. python bench/tool_media_estimates.py
"""

from __future__ import annotations

from typing import Any

from agent_fsm import run
from tests.providers.loopback import LoopbackServer
from tests.providers.test_tool_media import RECORDINGS, _model, _script, _task, _tools


def _prompt(body: dict[str, Any]) -> int:
    usage = body.get("usage") or body.get("usageMetadata") or {}
    return int(usage.get("input_tokens") or usage.get("prompt_tokens") or usage.get("promptTokenCount") or 0)


def main() -> None:
    print("| recording | recorded growth | estimate | ratio |")
    print("|---|---|---|---|")
    for name, recording in sorted(RECORDINGS.items()):
        server = LoopbackServer().start()
        try:
            _script(server, recording, False)
            model = _model(recording, server.url, False)
            state = run(_task(recording), model, _tools(recording), system_prompt="").state
        finally:
            server.stop()
        last = len(recording.interactions) - 1
        growth = _prompt(recording.response(last)) - _prompt(recording.response(last - 1))
        estimate = sum(model.estimator(message) for message in state.messages[-3:-1])  # the call and its result
        print(f"| {name} | {growth} | {estimate} | {estimate / growth:.2f} |")


if __name__ == "__main__":
    main()
