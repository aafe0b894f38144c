"""
OpenAI's Responses API (``POST /v1/responses``), translated to and from the engine's OpenAI-wire transcript.

The transcript travels as ``input`` items: the system prompt as
``instructions``, a user message as a ``user`` item, a proposal as a
``function_call`` item (its ``call_id`` is the engine's call id), a tool result
as a ``function_call_output``. The reply's ``output`` items come back the
other way: ``message`` items give the text (a ``refusal`` part ends the reply
``refusal``), ``function_call`` items the calls.

A reply that holds items beyond text and calls (``reasoning`` items with their
encrypted content, the server's own tools) keeps its whole ``output`` in the
assistant message's ``responses_output`` field, and those items are sent back
on the next turn: a reasoning model resumes from them. The adapter never
stores anything with the provider (``store`` is false, and the reasoning is
asked for encrypted so that it can travel in the transcript), so the items go
back without their ids: the API would look an id up, and find nothing.

A reply cut short is ``status: "incomplete"``: ``max_output_tokens`` reads as
finish ``length``, ``content_filter`` as ``content_filter``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm.engine import ModelReply, assistant_text, has_parts
from agent_fsm.providers._adapter import (
    SYSTEM_ROLES,
    HttpModel,
    cache_key,
    check_cache,
    check_parts,
    check_tool_names,
    data_url,
    kept_parts,
    model_of,
    object_of,
    output_name,
    prompt_tokens,
    system_text,
    usage_count,
    wire_tool_name,
)
from agent_fsm.providers._http import ProviderConfigError
from agent_fsm.providers._openai import wire_arguments
from agent_fsm.providers._responses_stream import ResponsesStream

__all__ = ["OpenAIResponses", "to_responses_input"]

OUTPUT_KEY = "responses_output"
"""The assistant message field that keeps a reply's output items to be sent back verbatim."""

_PLAIN_ITEMS = frozenset({"message", "function_call"})
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}
# Output fields not sent back: the reply's status and log-probabilities, and item ids, which with
# ``store: false`` name nothing the API kept (it answers "Item with id ... not found").
_OUTPUT_ONLY = frozenset({"id", "status", "logprobs"})


def _input_item(item: Mapping[str, Any]) -> dict[str, Any] | None:
    """
    An output item as the input item that sends it back (its id, output-only fields and nulls dropped).

    A ``message`` goes back as plain assistant text (``None`` when it held only a refusal).
    """
    if item.get("type") == "message":
        texts, _ = _message_parts(item)
        return {"type": "message", "role": "assistant", "content": "".join(texts)} if texts else None
    return {k: v for k, v in item.items() if v is not None and k not in _OUTPUT_ONLY}


def _assistant_items(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    kept = kept_parts(message, OUTPUT_KEY)
    if kept is not None:
        return [sent for sent in map(_input_item, kept) if sent is not None]
    items: list[dict[str, Any]] = []
    text = assistant_text(message)
    if text:
        items.append({"type": "message", "role": "assistant", "content": text})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        call = object_of(call) or {}
        function = object_of(call.get("function")) or {}
        items.append(
            {
                "type": "function_call",
                "call_id": str(call.get("id", "")),
                "name": wire_tool_name(function.get("name")),
                "arguments": wire_arguments(function.get("arguments")),
            }
        )
    return items


def _input_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A content part as ``input_text``, ``input_image`` or ``input_file`` (by ``file_url`` or ``file_data``)."""
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": part["text"]}
    if kind == "image":
        return {"type": "input_image", "image_url": data_url(part), "detail": "auto"}
    if "url" in part:
        return {"type": "input_file", "file_url": part["url"]}
    return {"type": "input_file", "filename": part.get("name", "document.pdf"), "file_data": data_url(part)}


def to_responses_input(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Split an OpenAI-wire transcript into the Responses API's ``instructions`` and ``input`` items."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in SYSTEM_ROLES:
            continue
        if role == "assistant":
            items.extend(_assistant_items(message))
        elif role == "tool":
            content = message.get("content")
            output: Any = content if isinstance(content, str) else json.dumps(content)
            if has_parts(message):  # a result's images and files: the output is a list of input parts
                output = [_input_part(p) for p in message["content"]]
            items.append(
                {"type": "function_call_output", "call_id": str(message.get("tool_call_id", "")), "output": output}
            )
        elif has_parts(message):  # images and files: only a user message (check_parts)
            parts = [_input_part(p) for p in message["content"]]
            items.append({"type": "message", "role": "user", "content": parts})
        else:
            text = assistant_text(message)
            items.append({"type": "message", "role": "user", "content": text})
    return system_text(messages), items


def to_responses_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """
    OpenAI chat declarations as Responses function tools.

    ``strict`` is sent as ``False``: the API's default is strict decoding,
    which refuses any schema with an optional property or an open object.
    """
    converted = []
    for tool in tools:
        function = object_of(tool.get("function")) or {}
        entry: dict[str, Any] = {
            "type": "function",
            "name": function.get("name"),
            "parameters": function.get("parameters") or {"type": "object", "properties": {}},
            "strict": False,
        }
        if function.get("description"):
            entry["description"] = function["description"]
        converted.append(entry)
    return converted


def _message_parts(item: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The ``output_text`` and the ``refusal`` texts of one ``message`` item."""
    texts: list[str] = []
    refusals: list[str] = []
    content = item.get("content")
    for part in content if isinstance(content, list) else []:
        part = object_of(part) or {}
        if part.get("type") == "output_text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
            refusals.append(part["refusal"])
    return texts, refusals


def from_responses_output(output: list[Any]) -> dict[str, Any]:
    """A reply's ``output`` items as one OpenAI-wire assistant message (``responses_output`` when needed)."""
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[dict[str, Any]] = []
    verbatim = False
    for item in output:
        item = object_of(item) or {}
        kind = item.get("type")
        if kind not in _PLAIN_ITEMS:
            verbatim = True
        if kind == "message":
            said, refused = _message_parts(item)
            texts.extend(said)
            refusals.extend(refused)
        elif kind == "function_call":
            arguments = item.get("arguments")
            calls.append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {
                        "name": item.get("name"),
                        "arguments": "{}" if arguments is None or arguments == "" else arguments,
                    },
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    if refusals:
        message["refusal"] = "".join(refusals)
    if verbatim:
        message[OUTPUT_KEY] = [dict(item) for item in output if isinstance(item, Mapping)]
    return message


class OpenAIResponses(HttpModel):
    """
    A model behind OpenAI's ``POST {base_url}/responses``.

    Environment as :class:`OpenAIChat`: ``OPENAI_BASE_URL`` (default
    ``https://api.openai.com/v1``), ``OPENAI_MODEL``, ``OPENAI_API_KEY``.
    ``reasoning`` (e.g. ``{"effort": "low", "summary": "auto"}``) is sent as
    the request's ``reasoning``; the reasoning items a model returns are kept
    in the transcript, their content encrypted, and sent back. ``cache=True``
    sets ``prompt_cache_key`` to one key per agent (its model, system prompt
    and tools: see :func:`cache_key`); a string is used as the key itself.
    With ``stream=True`` the reply comes as the Responses event stream,
    assembled into the same reply. See :class:`HttpModel` for the transport options.
    """

    provider = "openai-responses"
    base_url_env = "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"
    model_env = "OPENAI_MODEL"
    api_key_env = "OPENAI_API_KEY"
    path = "/responses"
    output_cap_field = "max_output_tokens"

    def __init__(
        self, *, reasoning: Mapping[str, Any] | None = None, cache: bool | str = False, **options: Any
    ) -> None:
        if reasoning is not None and not isinstance(reasoning, Mapping):
            raise ProviderConfigError(f"reasoning must be a mapping such as {{'effort': 'low'}}, got {reasoning!r}")
        super().__init__(**options)
        if self.seed is not None:
            raise ProviderConfigError("the Responses API takes no seed; leave seed unset")
        self.reasoning = dict(reasoning) if reasoning is not None else None
        self.cache = check_cache(cache)

    def request_body(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], output: Any = None
    ) -> dict[str, Any]:
        """
        ``instructions`` and ``input`` items, function tools, ``store: false`` and encrypted reasoning asked back.

        Typed ``output`` whose schema is an object is asked for as ``text.format``
        ``{"type": "json_schema", ...}``, ``strict`` when the schema meets the strict rules.

        Raises:
            ProviderFailure: ``invalid_request`` when a declared tool's name is one the API refuses,
                or an image or file stands outside a user message or a tool result.
        """
        check_tool_names(self, tools)
        check_parts(self, messages, "the Responses API", roles=("user", "tool"))
        instructions, items = to_responses_input(messages)
        body: dict[str, Any] = {
            "model": self.model,
            "input": items,
            "store": False,
            "include": ["reasoning.encrypted_content"],
        }
        if instructions is not None:
            body["instructions"] = instructions
        if tools:
            body["tools"] = to_responses_tools(tools)
            if self.tool_choice is not None:
                body["tool_choice"] = (
                    self.tool_choice
                    if self.tool_choice in ("auto", "none", "required")
                    else {"type": "function", "name": self.tool_choice}
                )
            if self.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = self.parallel_tool_calls
        if self.reasoning is not None:
            body["reasoning"] = dict(self.reasoning)
        if output is not None and output.schema.get("type") == "object":
            body["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": output_name(output),
                    "schema": output.schema,
                    "strict": output.strict,
                }
            }
        if self.cache:
            body["prompt_cache_key"] = cache_key(self.cache, self.model, instructions, body.get("tools"))
        return self._with_options(body)

    def stream_assembler(self) -> ResponsesStream:
        """A Responses event-stream assembler (``response.created`` ... ``response.completed``)."""
        return ResponsesStream()

    def read_reply(self, data: Any, status: int = 200) -> ModelReply:
        """The ``output`` items as one assistant message; ``status`` and ``incomplete_details`` as its finish."""
        reply = object_of(data)
        if reply is None:
            raise self._bad(f"expected a JSON object with 'output', got {type(data).__name__}", status)
        output = reply.get("output")
        if not isinstance(output, list):
            raise self._bad(f"the reply has no output items (keys: {sorted(reply)})", status)
        state = reply.get("status")
        if state == "failed":
            error = object_of(reply.get("error")) or {}
            raise self._http.failure(
                f"the response failed: {str(error.get('message') or error.get('code') or 'no reason given')[:200]}",
                kind="bad_response",
                status=status,
            )
        message = from_responses_output(output)
        finish: str | None = "tool_calls" if message.get("tool_calls") else "stop"
        if state == "incomplete":
            reason = (object_of(reply.get("incomplete_details")) or {}).get("reason")
            finish = _INCOMPLETE.get(reason, "length") if isinstance(reason, str) else "length"
        elif state not in (None, "completed"):
            finish = None
        if message.get("refusal"):
            finish = "refusal"
        if message["content"] is None and "tool_calls" not in message and finish == "stop":
            raise self._bad(f"the reply has neither text nor function calls (status={state!r})", status)
        usage = object_of(reply.get("usage")) or {}
        return ModelReply(
            message,
            prompt_tokens=prompt_tokens(usage.get("input_tokens")),
            finish=finish,
            output_tokens=usage_count(usage.get("output_tokens")),
            cached_tokens=usage_count((object_of(usage.get("input_tokens_details")) or {}).get("cached_tokens")),
            reasoning_tokens=usage_count((object_of(usage.get("output_tokens_details")) or {}).get("reasoning_tokens")),
            model=model_of(reply),
        )
