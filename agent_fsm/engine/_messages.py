"""
Observations and token accounting, and the OpenAI-compatible wire format with a parser that never raises.

Observations (what happened when a call was attempted) and token accounting.


[parts]
Images and files in the conversation: typed parts, their saved JSON form, placeholders and token estimates.

A message's ``content`` is text, or a list of parts when it carries an image
or a file. Each part is plain JSON so a saved state holds it losslessly::

    {"type": "text", "text": "..."}
    {"type": "image", "url": "https://..."}
    {"type": "image", "media_type": "image/png", "data": "<base64>"}
    {"type": "file", "url": "https://..."}            (a PDF the provider fetches)
    {"type": "file", "media_type": "application/pdf", "data": "<base64>"}
    (a file given as bytes may also carry "name": its file name, sent where the provider takes one)

Nothing else is a part: :func:`content_problem` refuses any other shape, and
bytes above :data:`MAX_PART_BYTES` are refused where they enter (typed, as
:class:`ContentPartError`), so a transcript that saved is one that loads.
Each adapter writes its provider's form of a part, or refuses it typed. A
tool's result may hold them too (:func:`split_media`): the observation shows
their placeholders, and the tool message carries the parts.


[wire]
The OpenAI-compatible message format, and a parser that never raises on model text.

An assistant message proposes tool calls as data: each entry carries an id
(echoed back by the tool message that answers it), a tool name, and the
arguments as a JSON *string* the model generated. Everything in it may be
broken; broken parts become proposals that fail validation, never exceptions.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import math
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from agent_fsm.engine._errors import AgentFSMError
from agent_fsm.engine._json import DEPTH_CEILING, argument_problem, describe, nesting_exceeds, storable
from agent_fsm.engine._tools import ToolCall

if TYPE_CHECKING:  # a result is formatted here with the transcript, never built
    from agent_fsm.engine._state import RunResult

__all__ = [
    "CallIds",
    "ContentPartError",
    "FILE_TYPES",
    "File",
    "IMAGE_TYPES",
    "Image",
    "MAX_PART_BYTES",
    "Observation",
    "ObservationKind",
    "Task",
    "TokenEstimator",
    "answer_message",
    "assistant_text",
    "content_problem",
    "content_text",
    "estimate_tokens",
    "INVALID_OUTPUT_HEAD",
    "format_result",
    "format_transcript",
    "has_parts",
    "image_size",
    "image_tokens",
    "media_estimate",
    "media_estimator",
    "media_tokens",
    "invalid_output_message",
    "normalise_reply",
    "parse_tool_calls",
    "part_bytes",
    "placeholder",
    "split_media",
    "to_json_data",
    "tool_call_message",
    "tool_message",
    "user_content",
]


# --- content parts ---

MAX_PART_BYTES = 20 * 1024 * 1024
"""The most bytes one image or file may hold (20 MiB, the smallest of the providers' inline limits)."""

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image media types every supported provider reads."""

FILE_TYPES = ("application/pdf",)
"""The file media types a part may carry: PDF, the one document type the providers share."""

_PART_KINDS = {"image": IMAGE_TYPES, "file": FILE_TYPES}
_URL_KEYS = frozenset({"type", "url"})
_DATA_KEYS = frozenset({"type", "media_type", "data"})
_NAMED_KEYS = _DATA_KEYS | {"name"}
_TEXT_KEYS = frozenset({"type", "text"})


class ContentPartError(AgentFSMError, ValueError):
    """An image or file cannot enter the conversation: wrong media type, bad base64, or above the size cap."""


def _encoded_size(data: str) -> int:
    # The decoded length of base64 text, without decoding it.
    return len(data) * 3 // 4 - data[-2:].count("=")


def part_problem(part: Any) -> str | None:
    """Why ``part`` is not a content part in its saved form (None when it is one)."""
    if type(part) is not dict:
        return "a part must be an object"
    kind = part.get("type")
    keys = part.keys()
    if kind == "text":
        return None if keys == _TEXT_KEYS and type(part["text"]) is str else "a text part is {type, text: string}"
    types = _PART_KINDS.get(kind) if type(kind) is str else None
    if types is None:
        return f"type must be text, image or file, not {kind!r}"
    if keys == _URL_KEYS:
        url = part["url"]
        ok = type(url) is str and url.startswith(("https://", "http://", "gs://"))
        return None if ok else f"an {kind}'s url must be an http(s) or gs:// address"
    if keys != _DATA_KEYS and (kind != "file" or keys != _NAMED_KEYS):
        return f"an {kind} part is {{type, url}} or {{type, media_type, data}}, got keys {sorted(keys)}"
    media, data = part["media_type"], part["data"]
    if type(part.get("name", "")) is not str:
        return "a file's name must be a string"
    if media not in types:
        return f"an {kind}'s media_type must be one of {', '.join(types)}, not {media!r}"
    if type(data) is not str or not data:
        return f"an {kind}'s data must be non-empty base64 text"
    if _encoded_size(data) > MAX_PART_BYTES:
        return f"an {kind} holds {_encoded_size(data)} bytes, above the cap of {MAX_PART_BYTES}"
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"an {kind}'s data is not valid base64"
    return None


def content_problem(content: Any) -> str | None:
    """Why a message's ``content`` is not text, null or a list of parts (None when it is)."""
    if type(content) is not list:
        return None
    for index, part in enumerate(content):
        problem = part_problem(part)
        if problem is not None:
            return f"part {index}: {problem}"
    return None


def _checked(
    kind: str, url: str | None, data: bytes | None, media_type: str | None, name: str | None = None
) -> dict[str, Any]:
    if (url is None) == (data is None):
        raise ContentPartError(f"an {kind} takes either url= or data= (with media_type=), not both or neither")
    if url is not None:
        part: dict[str, Any] = {"type": kind, "url": url}
    else:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise ContentPartError(f"an {kind}'s data must be bytes, got {type(data).__name__}")
        size = len(memoryview(data))
        if size > MAX_PART_BYTES:
            raise ContentPartError(f"an {kind} of {size} bytes is above the cap of {MAX_PART_BYTES}")
        part = {"type": kind, "media_type": media_type, "data": base64.b64encode(bytes(data)).decode("ascii")}
        if name is not None:
            part["name"] = name
    problem = part_problem(part)
    if problem is not None:
        raise ContentPartError(problem)
    return part


class _Shown:
    """Text for an image or file: its placeholder, so a log, repr or tool result never shows the bytes."""

    part: dict[str, Any]

    def __str__(self) -> str:
        return placeholder(self.part)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({placeholder(self.part)})"


@attrs.frozen(init=False, repr=False)
class Image(_Shown):
    """
    An image in a task, a history message or a tool result: a URL, or bytes with a media type.

    ``Image(url="https://...")`` or ``Image(data=png_bytes, media_type="image/png")``.

    Raises:
        ContentPartError: both or neither of url and data, a media type outside
            :data:`IMAGE_TYPES`, or more than :data:`MAX_PART_BYTES` bytes.
    """

    part: dict[str, Any]

    def __init__(self, *, url: str | None = None, data: bytes | None = None, media_type: str | None = None) -> None:
        self.__attrs_init__(_checked("image", url, data, media_type))


@attrs.frozen(init=False, repr=False)
class File(_Shown):
    """
    A file (a PDF) in a task, a history message or a tool result: a URL, or bytes.

    ``File(data=pdf_bytes, name="invoice.pdf")`` (``media_type`` defaults to
    ``application/pdf``; ``name`` is sent where a provider takes a file name) or ``File(url=...)``.

    Raises:
        ContentPartError: as :class:`Image`, for :data:`FILE_TYPES`.
    """

    part: dict[str, Any]

    def __init__(
        self,
        *,
        url: str | None = None,
        data: bytes | None = None,
        media_type: str = "application/pdf",
        name: str | None = None,
    ) -> None:
        self.__attrs_init__(_checked("file", url, data, media_type, name))


Task = str | Sequence["str | Image | File"]
"""What a run is given: text, or a sequence of text, :class:`Image` and :class:`File` items."""


def user_content(task: Any) -> Any:
    """
    A task (or a history message's content) as ``content``: text stays text; a list becomes parts.

    A part already in its saved form is checked and kept. Content of any other
    type is returned unchanged (an old history's own business).

    Raises:
        ContentPartError: an item that is neither text, an :class:`Image`, a :class:`File`
            nor a part in its saved form.
    """
    if isinstance(task, str) or not isinstance(task, Sequence):
        return task
    parts: list[dict[str, Any]] = []
    for item in task:
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif isinstance(item, Image | File):
            parts.append(dict(item.part))
        elif isinstance(item, Mapping):
            parts.append(dict(item))
        else:
            raise ContentPartError(f"content holds text, Image and File, not {type(item).__name__}")
    problem = content_problem(parts)
    if problem is not None:
        raise ContentPartError(problem)
    return parts


def has_parts(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` carries an image or a file."""
    content = message.get("content")
    return type(content) is list and any(type(p) is dict and p.get("type") in _PART_KINDS for p in content)


def part_bytes(part: Mapping[str, Any]) -> bytes:
    """The bytes of a part given as data (empty for a URL)."""
    data = part.get("data")
    return base64.b64decode(data) if isinstance(data, str) else b""


def placeholder(part: Mapping[str, Any]) -> str:
    """What stands for a part on screens and in summaries: its type and size (or address), never its bytes."""
    kind = part.get("type")
    if kind == "text":
        return str(part.get("text", ""))
    data = part.get("data")
    if isinstance(data, str):
        return f"[{kind} {part.get('media_type')}, {_encoded_size(data)} bytes]"
    return f"[{kind} at {part.get('url')}]"


def content_text(content: Any) -> str:
    """A message's content as text for reading: parts joined, each image or file as its placeholder."""
    if type(content) is list:
        return " ".join(placeholder(p) if isinstance(p, Mapping) else str(p) for p in content)
    return content if isinstance(content, str) else json.dumps(content)


# --- token estimates ---


def image_size(data: bytes) -> tuple[int, int] | None:
    """The width and height a PNG, GIF, JPEG or WebP header states (None when it cannot be read)."""
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n":
            return struct.unpack(">II", data[16:24])
        if data[:6] in (b"GIF87a", b"GIF89a"):
            return struct.unpack("<HH", data[6:10])
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
        if data[:2] == b"\xff\xd8":
            return _jpeg_size(data)
    except (struct.error, IndexError):
        return None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return w, h
        i += 2 + struct.unpack(">H", data[i + 2 : i + 4])[0]
    return None


# An image whose size cannot be read is priced as the largest the rules allow, so budgets still bind.
_UNKNOWN = (2048, 2048)


def image_tokens(size: tuple[int, int] | None, rule: str = "openai") -> int:
    """
    The prompt tokens one image costs under a provider's published rule.

    ``openai`` (also Ollama's estimate): fit in 2048x2048, shortest side to 768,
    then 85 + 170 per 512-pixel tile. ``anthropic``: fit the long edge in 1568,
    then width x height / 750. ``gemini``: 258 when both sides are at most 384,
    else 258 per 768-pixel tile.
    """
    w, h = size or _UNKNOWN
    w, h = max(w, 1), max(h, 1)
    if rule == "anthropic":
        scale = min(1.0, 1568 / max(w, h))
        return math.ceil(w * scale * h * scale / 750)
    if rule == "gemini":
        if w <= 384 and h <= 384:
            return 258
        return 258 * math.ceil(w / 768) * math.ceil(h / 768)
    fit = min(1.0, 2048 / max(w, h))
    fw, fh = w * fit, h * fit
    short = min(1.0, 768 / min(fw, fh))
    return 85 + 170 * math.ceil(fw * short / 512) * math.ceil(fh * short / 512)


_PAGE_TOKENS = {"gemini": 258}
"""A PDF page: Gemini's published 258; else the top of Anthropic's published 1,500-3,000 (text plus its image)."""


def media_tokens(part: Mapping[str, Any], rule: str = "openai") -> int:
    """The tokens an image or file part costs; a PDF by its pages (one assumed when they cannot be counted)."""
    data = part_bytes(part)
    if part.get("type") == "image":
        return image_tokens(image_size(data) if data else None, rule)
    pages = data.count(b"/Type /Page") - data.count(b"/Type /Pages") if data else 0
    return _PAGE_TOKENS.get(rule, 3000) * max(pages, 1)


# --- observe ---

ObservationKind = Literal["result", "invalid", "denied", "error"]
_KINDS = ("result", "invalid", "denied", "error")


def to_json_data(value: Any) -> Any:
    """
    ``value`` as plain JSON data (dicts, lists, str, numbers, bools, None).

    Observations are stored as JSON data so that a saved run reads back
    exactly as it was. Plain data is copied as is (no JSON round trip);
    objects JSON cannot hold are stored as their ``str``, and a value that
    cannot be stored at all (a cycle, a tuple key, ``NaN``) as its text form:
    see :func:`agent_fsm.engine._json.storable`, which also says whether
    text stood in.
    """
    return storable(value)[0]


def _placeholders(media: tuple[dict[str, Any], ...]) -> str:
    # A repr shows what stands for each part, never its bytes.
    return repr(tuple(placeholder(part) for part in media))


@attrs.frozen
class Observation:
    """
    What came of trying a single tool call, typed, and tied to its ``call_id``.

    ``kind`` tells a denial (the gate refused) from an invalid proposal
    (it broke the contract) from an error (the handler failed in an expected
    way) from a result; a policy that only sees "failed" can only retry blindly.
    ``permanent`` marks an ``error`` the tool declared unrecoverable
    (``ToolError(..., permanent=True)``); such an error ends the run ``handoff``.
    ``text_form`` marks content that is a text rendering of what the handler
    returned, because JSON could not hold it (the effect happened all the same).
    ``media`` holds the images and files the handler returned, as saved parts
    (see :func:`split_media`): ``content`` shows each one's placeholder, and the
    tool message (:func:`tool_message`) carries the parts to the model.
    """

    call_id: str
    ok: bool
    kind: ObservationKind = attrs.field(validator=attrs.validators.in_(_KINDS))
    content: Any
    permanent: bool = attrs.field(default=False, kw_only=True)
    text_form: bool = attrs.field(default=False, kw_only=True)
    media: tuple[dict[str, Any], ...] = attrs.field(default=(), kw_only=True, repr=_placeholders)

    def wire_content(self) -> str:
        """The text of the tool message that carries this observation to the model."""
        data = {"ok": self.ok, "kind": self.kind, "content": self.content}
        if self.permanent:
            data["permanent"] = True
        if self.text_form:
            data["text_form"] = True
        return json.dumps(data)


TokenEstimator = Callable[[Mapping[str, Any]], int]
"""Estimates the prompt tokens one wire message costs. Called once per message."""


def estimate_tokens(message: Mapping[str, Any]) -> int:
    """
    Four characters of serialized JSON per token, rounded up.

    Crude but monotone: the transcript, and so the price of the next turn,
    only grows. Replace it with a real tokenizer through ``run(estimator=...)``.
    An image or a file is priced by OpenAI's published rule for images (its
    tiles) and a PDF by its pages (see :func:`agent_fsm.engine._messages.media_tokens`),
    never by the length of its base64 text.
    """
    if type(message.get("content")) is list and has_parts(message):
        return media_estimate(message, "openai")
    return -(-len(json.dumps(message)) // 4)


def media_estimate(message: Mapping[str, Any], rule: str) -> int:
    """A message holding images or files: its text at four characters a token, each part by ``rule``."""
    parts = message["content"]
    text = {**message, "content": [p for p in parts if p.get("type") == "text"]}
    return -(-len(json.dumps(text)) // 4) + sum(media_tokens(p, rule) for p in parts if p.get("type") != "text")


def _by_rule(rule: str) -> TokenEstimator:
    def estimate(message: Mapping[str, Any]) -> int:
        if type(message.get("content")) is list and has_parts(message):
            return media_estimate(message, rule)
        return -(-len(json.dumps(message)) // 4)

    estimate.__name__ = estimate.__qualname__ = f"estimate_tokens_{rule}"
    return estimate


_ESTIMATORS: dict[str, TokenEstimator] = {"openai": estimate_tokens, "anthropic": _by_rule("anthropic"),
                                          "gemini": _by_rule("gemini")}  # fmt: skip


def media_estimator(rule: str) -> TokenEstimator:
    """
    :func:`estimate_tokens` with images and files priced by a provider's rule (``openai``, ``anthropic``, ``gemini``).

    One function per rule, the same each time (``openai``'s is ``estimate_tokens``
    itself): text is counted alike, so only the price of images and PDFs differs.
    An adapter's ``estimator`` is the one for its provider.
    """
    return _ESTIMATORS[rule]


# --- wire ---

Message = dict[str, Any]

_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls"})
_CALL_KEYS = frozenset({"id", "type", "function"})


def tool_call_message(
    call_id: str, name: str, arguments: Mapping[str, Any] | str, thought: str | None = None
) -> Message:
    """
    An assistant message proposing one tool call, shaped as a chat API sends it.

    ``arguments`` is serialized to the JSON string the wire carries; pass a
    ``str`` to send text verbatim (for example broken JSON, to test a parser).
    ``thought`` rides in ``content`` beside the call, as ReAct-style reasoning does.
    """
    text = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
    return {
        "role": "assistant",
        "content": thought,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}],
    }


def answer_message(text: str) -> Message:
    """A bare assistant reply: text only, with no tool call attached."""
    return {"role": "assistant", "content": text}


def tool_message(observation: Observation) -> Message:
    """
    The tool message that carries ``observation`` back to the model.

    Its content is the observation's JSON text; when the handler returned images
    or files, a list of parts: that text, then each image and file.
    """
    text = observation.wire_content()
    content: Any = [{"type": "text", "text": text}, *observation.media] if observation.media else text
    return {"role": "tool", "tool_call_id": observation.call_id, "content": content}


_MEDIA_DEPTH = 8
_NOT_SENT = f" (not sent: a result's images and files together are capped at {MAX_PART_BYTES} bytes)"
"""How deep in a result images and files are looked for (deeper ones, or a cycle, stay as their text form)."""


def split_media(value: Any) -> tuple[Any, tuple[dict[str, Any], ...]]:
    """
    A tool's result with each :class:`Image` and :class:`File` replaced by its placeholder, and those parts.

    Looked for at the top and in lists, tuples and a dict's values (down to
    :data:`_MEDIA_DEPTH` levels): what a gate, a screen, an event or a summary
    reads is the placeholder, while the tool message carries the parts
    themselves (see :func:`tool_message`). Their bytes together stay within
    :data:`MAX_PART_BYTES`: one past it stays its placeholder, saying it was
    not sent. A result without any is returned as is.
    """
    media: list[dict[str, Any]] = []
    inside: set[int] = set()  # the containers being walked: one met again is a cycle, left to its text form
    room = MAX_PART_BYTES  # a result's parts together, as an MCP server's are: the transcript grows by one cap

    def walk(item: Any, depth: int) -> Any:
        nonlocal room
        if isinstance(item, Image | File):
            data = item.part.get("data")
            size = _encoded_size(data) if isinstance(data, str) else 0
            if size > room:
                return placeholder(item.part) + _NOT_SENT
            room -= size
            media.append(dict(item.part))
            return placeholder(item.part)
        if depth >= _MEDIA_DEPTH or id(item) in inside or type(item) not in (list, tuple, dict):
            return item
        inside.add(id(item))
        if type(item) is dict:
            walked: Any = {key: walk(x, depth + 1) for key, x in item.items()}
        else:
            walked = [walk(x, depth + 1) for x in item]
        inside.discard(id(item))
        return walked

    if not _holds_media(value, 0):
        return value, ()
    return walk(value, 0), tuple(media)


def _holds_media(value: Any, depth: int) -> bool:
    # Looked at before anything is copied: a result without media is kept as the very object returned.
    if isinstance(value, Image | File):
        return True
    if depth >= _MEDIA_DEPTH:
        return False
    if type(value) in (list, tuple):
        return any(_holds_media(x, depth + 1) for x in value)
    if type(value) is dict:
        return any(_holds_media(x, depth + 1) for x in value.values())
    return False


INVALID_OUTPUT_HEAD = '{"ok": false, "kind": "invalid", "content": '
"""How the message sending an invalid typed answer back begins: a saved state's count of them is checked by it."""


def invalid_output_message(reason: str) -> Message:
    """The user message that sends an invalid typed answer back to the model, read as a tool's invalid observation."""
    return {
        "role": "user",
        "content": json.dumps({"ok": False, "kind": "invalid", "content": reason}, ensure_ascii=False),
    }


def assistant_text(message: Mapping[str, Any]) -> str | None:
    """The text of an assistant message: ``content`` if a string, text parts joined if a list."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        return "".join(parts)
    return str(content)


def _text_of(raw: Any) -> str:
    # The text that stands for arguments a server sent already parsed; never raises.
    try:
        return json.dumps(raw, default=str)
    except (TypeError, ValueError, RecursionError):
        return describe(raw)  # cyclic, too deep, or keys JSON cannot write


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# Python's json reads NaN and Infinity; arguments holding them are kept as text only (and refused),
# so a saved state stays strict JSON. One decoder, built once: json.loads(..., parse_constant=) builds one per call.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _storable(value: Any) -> bool:
    # What may be kept as parsed data in a state that must save: plain JSON, finite, not too deep.
    return argument_problem(value, max_depth=DEPTH_CEILING) is None


def _parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    if type(raw) is not str:
        if isinstance(raw, Mapping):  # some servers send parsed arguments; accept them as they are
            arguments = dict(raw)
            # Not plain JSON data (cyclic, too deep, NaN, a set ...): kept only as text, refused as unparsed.
            return (arguments if _storable(arguments) else None), _text_of(raw)
        if not isinstance(raw, str):
            return None, None if raw is None else describe(raw)
    if not raw or raw.isspace():  # an empty argument string is how a no-argument call often arrives
        return {}, raw
    try:
        parsed = _DECODER.decode(raw)
    except (ValueError, RecursionError):
        return None, raw
    if not isinstance(parsed, dict):
        return None, raw
    # Each level of nesting needs a bracket, so counting them is a cheap bound before walking.
    if raw.count("{") + raw.count("[") > DEPTH_CEILING and nesting_exceeds(parsed, DEPTH_CEILING):
        return None, raw
    return parsed, raw


class CallIds:
    """
    The tool-call ids a transcript holds, handing out unique ones.

    ``claim(wanted)`` returns ``wanted`` if it is free, else the first free
    ``wanted~2``, ``wanted~3`` ... Deterministic, and the same after a resume
    (rebuilt from the messages) as in memory; a counter per id keeps a model
    that reuses one id every turn from making each claim scan all earlier ones.
    """

    __slots__ = ("_next", "used")

    def __init__(self, used: set[str] | None = None) -> None:
        self.used: set[str] = set() if used is None else used
        self._next: dict[str, int] = {}

    @classmethod
    def of(cls, messages: list[Message]) -> CallIds:
        """The ids the assistant messages of ``messages`` carry."""
        used: set[str] = set()
        for message in messages:
            calls = message.get("tool_calls") if isinstance(message, Mapping) else None
            if isinstance(calls, list):
                used.update(c["id"] for c in calls if isinstance(c, Mapping) and isinstance(c.get("id"), str))
        return cls(used)

    def claim(self, wanted: str) -> str:
        """A free id, ``wanted`` if possible; it is taken from then on."""
        candidate, n = wanted, self._next.get(wanted, 1)
        while candidate in self.used:
            n += 1
            candidate = f"{wanted}~{n}"
        if n > 1:
            self._next[wanted] = n
        self.used.add(candidate)
        return candidate


def _extras(part: Mapping[str, Any], known: frozenset[str]) -> Message:
    """
    The provider's fields beside the ones the engine rewrites (reasoning, refusal, signed thinking blocks), copied.

    Kept as they came: some providers refuse the next turn without them. One
    that is not plain JSON data, or nests past DEPTH_CEILING, could not be
    saved, and is dropped.
    """
    return {k: copy.deepcopy(v) for k, v in part.items() if k not in known and isinstance(k, str) and _storable(v)}


def normalise_reply(reply: Any, turn: int, taken: CallIds | None = None) -> tuple[Message, list[ToolCall]]:
    """
    Turn whatever the model returned into a well-formed assistant message and its proposals.

    The stored message keeps every proposal the model made, with repairs so
    the transcript stays valid wire format: a call without a usable id gets
    ``call_<turn>_<index>``, the arguments are always a string, and call ids
    are unique. ``taken`` holds the ids already in the transcript (it is
    updated); an id that is taken, or repeated within the reply, becomes the
    first free ``<id>~2``, ``<id>~3`` ... (see :class:`CallIds`), and the call
    keeps the model's id as ``original_id``. Other fields of the message and
    of each call (a provider's reasoning or signatures) are kept unchanged,
    unless they are not JSON data a saved state can hold. Anything that is not a mapping at
    all is kept as the answer text ``str(reply)``.
    """
    if type(reply) is not dict and not isinstance(reply, Mapping):
        return {"role": "assistant", "content": str(reply)}, []
    content = reply.get("content")  # plain text read here; any other form as assistant_text reads it
    message: Message = {"role": "assistant", "content": content if type(content) is str else assistant_text(reply)}
    if not reply.keys() <= _MESSAGE_KEYS:
        message.update(_extras(reply, _MESSAGE_KEYS))
    raw_calls = reply.get("tool_calls")
    if not raw_calls:
        return message, []
    if not isinstance(raw_calls, list):
        raw_calls = [raw_calls]
    taken = CallIds() if taken is None else taken
    calls: list[ToolCall] = []
    wire_calls: list[Message] = []
    for index, item in enumerate(raw_calls):
        if type(item) is not dict and not isinstance(item, Mapping):
            item = {}
        function = item.get("function")
        if type(function) is not dict and not isinstance(function, Mapping):
            function = {}
        sent = item.get("id")
        wanted = sent if isinstance(sent, str) and sent else f"call_{turn}_{index}"
        call_id = taken.claim(wanted)
        renamed = sent if call_id != wanted and isinstance(sent, str) and sent else None
        name = function.get("name")
        name = name if isinstance(name, str) else ""
        arguments, raw = _parse_arguments(function.get("arguments"))
        text = raw if raw is not None else ""
        calls.append(ToolCall(call_id, name, arguments, text, original_id=renamed))
        wire: Message = {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}
        if not item.keys() <= _CALL_KEYS:
            wire.update(_extras(item, _CALL_KEYS))
        wire_calls.append(wire)
    message["tool_calls"] = wire_calls
    return message, calls


def parse_tool_calls(message: Mapping[str, Any]) -> list[ToolCall]:
    """The proposals in an assistant message (empty for a plain answer). Never raises."""
    return normalise_reply(message, 0)[1]


# --- transcript ---

_LABELS = {"system": "system", "user": "user", "assistant": "model", "tool": "tool"}


def format_transcript(messages: Iterable[Mapping[str, Any]]) -> str:
    """The transcript as aligned lines: ``role | text`` and ``model | -> tool {arguments}``."""
    lines = []
    for message in messages:
        label = f"{_LABELS.get(message.get('role', ''), str(message.get('role')))[:6]:6} |"
        content = message.get("content")
        if message.get("role") == "assistant":
            if content:
                lines.append(f"{label} {content}")
            for item in message.get("tool_calls") or ():
                function = item.get("function", {})
                lines.append(f"{label} -> {function.get('name')} {function.get('arguments')}  [{item.get('id')}]")
        else:
            lines.append(f"{label} {content_text(content)}")
    return "\n".join(lines)


def format_result(result: RunResult, effects: Iterable[Any] | None = None) -> str:
    """Transcript, typed ending, counters and (when given) the effect log."""
    state = result.state
    lines = [format_transcript(state.messages), ""]
    lines.append(
        f"stop={result.stop.value}  turns={state.turns}  tool_attempts={state.tool_attempts}"
        f"  observations={len(state.observations)}"
    )
    if result.code != result.stop.value:
        lines.append(f"code: {result.code}")
    if result.answer is not None:
        lines.append(f"answer: {result.answer}")
    if result.blocked_on is not None:
        lines.append(f"blocked on: {result.blocked_on.name} {json.dumps(result.blocked_on.arguments)}")
    if state.fault is not None:
        lines.append(f"provider fault: {state.fault.type} ({state.fault.kind}): {state.fault.message}")
    if effects is not None:
        lines.append(f"effect log: {json.dumps(list(effects))}")
    return "\n".join(lines)
