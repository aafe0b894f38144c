"""
Google's Gemini API (``generateContent``, ``streamGenerateContent``), translated to and from the engine's transcript.

The system prompt is ``systemInstruction``; messages are ``contents`` of role
``user`` or ``model`` made of ``parts``: text, a ``functionCall`` (its ``args``
an object), a ``functionResponse`` (named by the function, its ``response`` an
object). Gemini gives a call no id (or one of its own), so a call without one
is named ``gemini_call_<turn>_<n>`` in the transcript, and results find their
call by that id.

A reply whose parts carry more than text and calls (``thoughtSignature``,
thought summaries, ids) keeps its parts in the assistant message's
``gemini_parts`` field, sent back exactly as they came: Gemini's thinking
models need each signature back on the part it came with.

A reply withheld for safety (``finishReason`` ``SAFETY``, ``RECITATION``,
``BLOCKLIST``, ``PROHIBITED_CONTENT``, ``SPII``, or a prompt blocked with
``promptFeedback.blockReason``) ends ``content_filter``, ``MAX_TOKENS``
ends ``length``. Tool parameters are written in Gemini's schema dialect, and
what it cannot express is refused before anything is sent (see ``_gemini_schema``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm.engine import ModelReply, assistant_text, has_parts
from agent_fsm.providers._adapter import (
    SYSTEM_ROLES,
    HttpModel,
    arguments_object,
    check_parts,
    check_tool_names,
    kept_parts,
    media_after_results,
    merge_turn,
    model_of,
    object_of,
    prompt_tokens,
    refuse_part,
    result_media,
    result_text,
    system_text,
    usage_count,
    wire_tool_name,
)
from agent_fsm.providers._anthropic import FINAL_TOOL, FINAL_TOOL_DESCRIPTION
from agent_fsm.providers._gemini_schema import gemini_schema
from agent_fsm.providers._gemini_stream import GeminiStream
from agent_fsm.providers._http import ProviderConfigError

__all__ = ["GeminiGenerate", "to_gemini_contents"]

PARTS_KEY = "gemini_parts"
"""The assistant message field that keeps a reply's parts to be sent back verbatim."""

CALL_PREFIX = "gemini_call_"
"""How a call id the adapter made up begins (Gemini gave none); it is never sent back."""

_BLOCKED = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"})
_MODEL_NAME = re.compile(r"^(?:models/)?([A-Za-z0-9][A-Za-z0-9._-]{0,127})$")
_CHOICE = {"auto": "AUTO", "none": "NONE", "required": "ANY"}


def _response_object(content: Any) -> dict[str, Any]:
    """A tool message's content as the object ``functionResponse.response`` must be."""
    if isinstance(content, str):
        try:
            data = json.loads(content)
        except (ValueError, RecursionError):
            data = content
    else:
        data = content
    return data if isinstance(data, dict) else {"result": data}


def _model_parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    kept = kept_parts(message, PARTS_KEY)
    if kept is not None:
        return kept
    parts: list[dict[str, Any]] = []
    text = assistant_text(message)
    if text:
        parts.append({"text": text})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        call = object_of(call) or {}
        function = object_of(call.get("function")) or {}
        wire: dict[str, Any] = {
            "name": wire_tool_name(function.get("name")),
            "args": arguments_object(function.get("arguments")),
        }
        ident = call.get("id")
        if isinstance(ident, str) and ident and not ident.startswith(CALL_PREFIX):
            wire["id"] = ident
        parts.append({"functionCall": wire})
    return parts


_BY_SUFFIX = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
              ".webp": "image/webp", ".pdf": "application/pdf"}  # fmt: skip


def url_media_type(part: Mapping[str, Any]) -> str | None:
    """The media type a part given by URL has by its address's suffix (a file is a PDF); None when unknown."""
    if part.get("type") == "file":
        return "application/pdf"
    path = str(part.get("url", "")).split("?", 1)[0].split("#", 1)[0].lower()
    return next((media for suffix, media in _BY_SUFFIX.items() if path.endswith(suffix)), None)


def _user_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A content part as ``text``, ``inlineData`` (bytes) or ``fileData`` (a URL, its type by suffix)."""
    if part.get("type") == "text":
        return {"text": part["text"]}
    if "url" in part:
        return {"fileData": {"fileUri": part["url"], "mimeType": url_media_type(part)}}
    return {"inlineData": {"mimeType": part["media_type"], "data": part["data"]}}


def to_gemini_contents(
    messages: Sequence[Mapping[str, Any]], *, media_in_results: bool = False
) -> tuple[str | None, list[dict[str, Any]]]:
    """
    Split an OpenAI-wire transcript into Gemini's system text and ``contents``.

    Consecutive messages of one role (a turn's function responses, then a
    user message) are merged, as Gemini wants roles to alternate. A result's
    images and files ride in its ``functionResponse.parts`` when
    ``media_in_results`` (Gemini 3 and later read them there).
    """
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call id -> function name, for the responses
    for message in messages:
        role = message.get("role")
        if role in SYSTEM_ROLES:
            continue
        if role == "assistant":
            calls = message.get("tool_calls")
            for call in calls if isinstance(calls, list) else []:
                if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
                    names[str(call.get("id", ""))] = wire_tool_name(call["function"].get("name"))
            role, parts = "model", _model_parts(message)
        elif role == "tool":
            ident = str(message.get("tool_call_id", ""))
            response: dict[str, Any] = {
                "name": names.get(ident, "_"),
                "response": _response_object(result_text(message.get("content"))),
            }
            media = result_media(message) if media_in_results else []
            if media:
                response["parts"] = [_user_part(p) for p in media]
            if ident and not ident.startswith(CALL_PREFIX):
                response["id"] = ident
            role, parts = "user", [{"functionResponse": response}]
        elif has_parts(message):  # images and files: only a user message (check_parts)
            role, parts = "user", [_user_part(p) for p in message["content"]]
        else:
            text = assistant_text(message)
            role, parts = "user", [{"text": text}] if text else []
        merge_turn(out, role, "parts", parts)
    return system_text(messages), out


def to_gemini_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """
    OpenAI declarations as one ``functionDeclarations`` tool, parameters in Gemini's dialect.

    Raises:
        ProviderConfigError: a tool's parameters say what the dialect cannot (named with the tool).
    """
    declarations = []
    for tool in tools:
        function = object_of(tool.get("function")) or {}
        name = function.get("name")
        entry: dict[str, Any] = {"name": name}
        if function.get("description"):
            entry["description"] = function["description"]
        parameters = function.get("parameters") or {}
        if parameters:
            try:
                entry["parameters"] = gemini_schema(parameters)
            except ProviderConfigError as exc:
                raise ProviderConfigError(f"tool {name!r}: {exc}") from None
        declarations.append(entry)
    return [{"functionDeclarations": declarations}] if declarations else []


class GeminiGenerate(HttpModel):
    """
    A Gemini model behind ``POST {base_url}/models/{model}:generateContent``.

    Environment: ``GEMINI_BASE_URL`` (default
    ``https://generativelanguage.googleapis.com/v1beta``), ``GEMINI_MODEL``,
    ``GEMINI_API_KEY`` (sent as ``x-goog-api-key``). ``stream=True`` asks
    ``streamGenerateContent?alt=sse`` and assembles the same reply.
    ``thinking`` (e.g. ``{"thinkingBudget": 1024, "includeThoughts": True}``)
    is sent as ``generationConfig.thinkingConfig``; ``safety_settings`` as
    ``safetySettings``. Typed output is asked for as ``responseSchema`` when
    the run has no tools, else as a required final function. A run's tools
    (and its typed output) are checked against Gemini's schema dialect when
    the agent is built: see :meth:`check_tools`.
    See :class:`HttpModel` for the transport options.
    """

    provider = "gemini"
    image_rule = "gemini"
    base_url_env = "GEMINI_BASE_URL"
    default_base_url = "https://generativelanguage.googleapis.com/v1beta"
    model_env = "GEMINI_MODEL"
    api_key_env = "GEMINI_API_KEY"
    path = ":generateContent"
    output_cap_field = "maxOutputTokens"

    def __init__(
        self,
        *,
        thinking: Mapping[str, Any] | None = None,
        safety_settings: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        found = _MODEL_NAME.match(self.model)
        if found is None:
            raise ProviderConfigError(
                f"GeminiGenerate needs a model name such as 'gemini-2.5-flash', got {self.model!r}"
            )
        self.model = found.group(1)
        if self.parallel_tool_calls is False:
            raise ProviderConfigError("Gemini cannot be asked for one call at a time; leave parallel_tool_calls unset")
        if thinking is not None and not isinstance(thinking, Mapping):
            raise ProviderConfigError(
                f"thinking must be a mapping such as {{'thinkingBudget': 1024}}, got {thinking!r}"
            )
        self.thinking = dict(thinking) if thinking is not None else None
        self.safety_settings = [dict(s) for s in safety_settings] if safety_settings is not None else None

    @property
    def reads_media_in_results(self) -> bool:
        """Whether this model reads images and files inside a function response (Gemini 3 and later)."""
        found = re.match(r"gemini-(\d+)", self.model)
        return found is not None and int(found.group(1)) >= 3

    def _path(self) -> str:
        verb = "streamGenerateContent?alt=sse" if self.streams else "generateContent"
        return f"/models/{self.model}:{verb}"

    def headers(self) -> dict[str, str]:
        """``x-goog-api-key`` (when a key is set)."""
        key = self._http.api_key
        return {"x-goog-api-key": key} if key else {}

    def check_tools(self, tools: Sequence[Mapping[str, Any]], output: Any = None) -> None:
        """
        Refuse, when an agent is defined, tools (and typed output) Gemini's schema dialect cannot express.

        Raises:
            ProviderConfigError: naming the tool, the keyword and where it is.
        """
        to_gemini_tools(tools)
        if output is not None:
            try:
                gemini_schema(output.schema)
            except ProviderConfigError as exc:
                raise ProviderConfigError(f"typed output {output.name!r}: {exc}") from None

    def request_body(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], output: Any = None
    ) -> dict[str, Any]:
        """
        ``systemInstruction``, ``contents``, ``tools`` and ``toolConfig``, ``generationConfig``.

        Raises:
            ProviderFailure: ``invalid_request`` when a tool's name or schema is one Gemini refuses,
                an image or file stands outside a user message (or, from Gemini 3 on, a function
                response), or an image's URL names no media type.
        """
        check_tool_names(self, tools)
        inline = self.reads_media_in_results
        if not inline:  # a function response takes no media before Gemini 3: they follow it
            messages = media_after_results(messages)
        check_parts(self, messages, "Gemini", roles=("user", "tool") if inline else ("user",))
        for message in messages:
            for part in message["content"] if has_parts(message) else ():
                if "url" in part and url_media_type(part) is None:
                    raise refuse_part(self, part, "to Gemini by a URL that names no media type (.png, .jpg, ...)")
        system, contents = to_gemini_contents(messages, media_in_results=inline)
        body: dict[str, Any] = {"contents": contents}
        if system is not None:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        config: dict[str, Any] = {}
        declared = list(tools)
        final = output is not None and output.schema.get("type") == "object"
        if final and tools and all((t.get("function") or {}).get("name") != FINAL_TOOL for t in tools):
            schema = {"name": FINAL_TOOL, "description": FINAL_TOOL_DESCRIPTION, "parameters": output.schema}
            declared.append({"type": "function", "function": schema})
        try:
            if declared:
                body["tools"] = to_gemini_tools(declared)
            if final and not tools:
                config["responseMimeType"] = "application/json"
                config["responseSchema"] = gemini_schema(output.schema)
        except ProviderConfigError as exc:
            raise self._http.failure(f"{exc}; not sent", kind="invalid_request") from None
        choice = self._tool_choice(final and bool(tools) and len(declared) > len(tools))
        if choice is not None and declared:
            body["toolConfig"] = {"functionCallingConfig": choice}
        if self.seed is not None:
            config["seed"] = self.seed
        if self.thinking is not None:
            config["thinkingConfig"] = dict(self.thinking)
        if self.temperature is not None:
            config["temperature"] = self.temperature
        body["generationConfig"] = config
        if self.safety_settings is not None:
            body["safetySettings"] = [dict(s) for s in self.safety_settings]
        body.update(self.extra_body)
        return body

    def _tool_choice(self, answer_by_call: bool) -> dict[str, Any] | None:
        if answer_by_call:
            return {"mode": "ANY"}  # the answer is a call of the final function, so some call is required
        if self.tool_choice is None:
            return None
        if self.tool_choice in _CHOICE:
            return {"mode": _CHOICE[self.tool_choice]}
        return {"mode": "ANY", "allowedFunctionNames": [self.tool_choice]}

    def _capped(self, body: dict[str, Any], cap: int | None) -> dict[str, Any]:
        """``generationConfig.maxOutputTokens`` at ``cap``; a lower cap already there stands."""
        if cap is not None:
            config = body.setdefault("generationConfig", {})
            given = config.get("maxOutputTokens")
            config["maxOutputTokens"] = min(given, cap) if isinstance(given, int) and given > 0 else cap
        return body

    def stream_fields(self) -> dict[str, Any]:
        """Nothing in the body: a stream is asked for by the URL (``streamGenerateContent?alt=sse``)."""
        return {}

    def stream_assembler(self) -> GeminiStream:
        """An assembler of ``GenerateContentResponse`` chunks."""
        return GeminiStream()

    def typed_reply(self, reply: ModelReply, output: Any, tools: Sequence[Mapping[str, Any]] = ()) -> ModelReply:
        """A call of the final function as the answer (its arguments, as JSON text); other calls go ahead first."""
        if not tools or any((t.get("function") or {}).get("name") == FINAL_TOOL for t in tools):
            return reply
        message = dict(reply.message)
        calls = message.get("tool_calls") or []
        final = [c for c in calls if isinstance(c, Mapping) and (c.get("function") or {}).get("name") == FINAL_TOOL]
        if not final:
            return reply
        rest = [c for c in calls if c not in final]
        kept = message.pop(PARTS_KEY, None)
        if rest and isinstance(kept, list):  # sent back less the final call, which gets no response
            message[PARTS_KEY] = [p for p in kept if (p.get("functionCall") or {}).get("name") != FINAL_TOOL]
        if rest:
            message["tool_calls"] = rest
            finish = reply.finish
        else:
            message.pop("tool_calls", None)
            message["content"] = final[0]["function"]["arguments"]
            finish = "stop"
        return ModelReply(
            message,
            prompt_tokens=reply.prompt_tokens,
            finish=finish,
            output_tokens=reply.output_tokens,
            cached_tokens=reply.cached_tokens,
            model=reply.model,
            reasoning_tokens=reply.reasoning_tokens,
        )

    def _reply_to(self, messages: Sequence[Mapping[str, Any]], data: Any, status: int) -> ModelReply:
        """Name calls without an id by the assistant messages before them, so replays give the same ids."""
        return self.read_reply(data, status, turn=sum(1 for m in messages if m.get("role") == "assistant"))

    def read_reply(self, data: Any, status: int = 200, *, turn: int = 0) -> ModelReply:
        """``candidates[0]``'s parts as one assistant message; its ``finishReason``; ``usageMetadata``."""
        reply = object_of(data)
        if reply is None:
            raise self._bad(f"expected a JSON object with 'candidates', got {type(data).__name__}", status)
        usage = object_of(reply.get("usageMetadata")) or {}
        candidates = reply.get("candidates")
        blocked = (object_of(reply.get("promptFeedback")) or {}).get("blockReason")
        if not isinstance(candidates, list) or not candidates:
            if blocked is None:
                raise self._bad(f"the reply has no candidates (keys: {sorted(reply)})", status)
            return self._usage(reply, {"role": "assistant", "content": None}, "content_filter", usage)
        candidate = object_of(candidates[0]) or {}
        content = object_of(candidate.get("content")) or {}
        parts = content.get("parts", [])
        if not isinstance(parts, list):
            raise self._bad(f"candidates[0].content.parts is not a list ({type(parts).__name__})", status)
        message = self._message(parts, turn)
        reason = candidate.get("finishReason")
        if reason in _BLOCKED:
            finish: str | None = "content_filter"
        elif reason == "MAX_TOKENS":
            finish = "length"
        elif reason in ("STOP", None):
            finish = "tool_calls" if message.get("tool_calls") else ("stop" if reason else None)
        else:
            finish = None
        if message["content"] is None and "tool_calls" not in message and finish not in ("length", "content_filter"):
            raise self._bad(f"the reply has neither text nor function calls (finishReason={reason!r})", status)
        return self._usage(reply, message, finish, usage)

    def _message(self, parts: list[Any], turn: int) -> dict[str, Any]:
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        verbatim = False
        for part in parts:
            part = object_of(part) or {}
            if part.get("thoughtSignature") or part.get("thought"):
                verbatim = True
            if part.get("thought"):
                continue  # a thought summary: kept with the parts, never the answer
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            call = object_of(part.get("functionCall"))
            if call is not None:
                ident = call.get("id")
                if isinstance(ident, str) and ident:
                    verbatim = True
                else:
                    ident = f"{CALL_PREFIX}{turn}_{len(calls)}"
                arguments = call.get("args")
                text = (
                    json.dumps(arguments) if isinstance(arguments, dict) else "{}" if arguments is None else arguments
                )
                calls.append(
                    {"id": ident, "type": "function", "function": {"name": call.get("name"), "arguments": text}}
                )
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
        if calls:
            message["tool_calls"] = calls
        if verbatim:
            message[PARTS_KEY] = [dict(p) for p in parts if isinstance(p, Mapping)]
        return message

    def _usage(
        self, reply: Mapping[str, Any], message: dict[str, Any], finish: str | None, usage: Mapping[str, Any]
    ) -> ModelReply:
        thoughts = usage_count(usage.get("thoughtsTokenCount"))
        written = usage_count(usage.get("candidatesTokenCount"))
        # Gemini counts thinking apart from the answer; both are billed as output.
        output = None if written is None and thoughts is None else (written or 0) + (thoughts or 0)
        name = reply.get("modelVersion")
        return ModelReply(
            message,
            prompt_tokens=prompt_tokens(usage.get("promptTokenCount")),
            finish=finish,
            output_tokens=output,
            cached_tokens=usage_count(usage.get("cachedContentTokenCount")),
            model=name if isinstance(name, str) and name else model_of(reply),
            reasoning_tokens=thoughts,
        )
