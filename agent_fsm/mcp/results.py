"""
What a ``tools/call`` answer becomes: the content of an observation the transcript and a saved state can hold.

* structured content (``structuredContent``) is the result, as the server sent it;
* text that is JSON is the result parsed; other text is the result as text;
* an image (PNG, JPEG, GIF, WebP) and an embedded PDF become an
  :class:`agent_fsm.Image` / :class:`agent_fsm.File`: the model sees them
  where its provider allows, and everything else reads their placeholder
  (the engine keeps them beside the observation's content); one above the size cap, or not
  valid base64, stays a placeholder;
* audio and other resources become typed placeholders (kind, MIME type,
  size): the model is told what came back, and the transcript does not carry
  megabytes of base64;
* several blocks are a list of the above;
* ``isError`` is an error with the server's text.

Then, whatever the shape: every secret the server was given is redacted, and
a result longer than the limit is cut to its first characters with a marker
saying how long it was. Nothing here raises on what a server sends.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import attrs

from agent_fsm.engine import MAX_PART_BYTES, ContentPartError, File, Image
from agent_fsm.mcp.secrets import Secrets

__all__ = ["DEFAULT_MAX_RESULT_CHARS", "Answer", "answer_of"]

DEFAULT_MAX_RESULT_CHARS = 100_000
"""The longest result (its JSON text) kept whole; a longer one is cut with a marker."""


@attrs.frozen
class Answer:
    """A server's answer to one call, made safe to keep: ``ok`` (not ``isError``) and its content."""

    ok: bool
    content: Any


def _size(data: str) -> int:
    # The decoded size of base64 data, without decoding it (a hostile server may send junk).
    padding = data[-2:].count("=") if data else 0
    return max(0, len(data) * 3 // 4 - padding)


def _block(block: Any) -> Any:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind in ("image", "audio"):
        data = getattr(block, "data", "") or ""
        return {"type": kind, "mime_type": getattr(block, "mime_type", None), "bytes": _size(str(data))}
    if kind == "resource_link":
        return {
            "type": "resource_link",
            "uri": str(getattr(block, "uri", "")),
            "name": getattr(block, "name", None),
            "mime_type": getattr(block, "mime_type", None),
        }
    if kind == "resource":
        resource = getattr(block, "resource", None)
        placeholder: dict[str, Any] = {
            "type": "resource",
            "uri": str(getattr(resource, "uri", "")),
            "mime_type": getattr(resource, "mime_type", None),
        }
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            placeholder["text"] = text
        else:
            placeholder["bytes"] = _size(str(getattr(resource, "blob", "") or ""))
        return placeholder
    return {"type": str(kind), "note": "a content block of a kind this adapter does not know"}


def _media(block: Any) -> Image | File | None:
    """The image or PDF a block holds, when the conversation can carry it (else None: it stays a placeholder)."""
    kind = getattr(block, "type", None)
    source = getattr(block, "resource", None) if kind == "resource" else block
    data = getattr(source, "data" if kind == "image" else "blob", None)
    media_type = getattr(source, "mime_type", None)
    if kind not in ("image", "resource") or not isinstance(data, str) or not isinstance(media_type, str):
        return None
    try:  # another type, bad base64, above the cap: the placeholder says what it was
        raw = base64.b64decode(data, validate=True)
        return Image(data=raw, media_type=media_type) if kind == "image" else File(data=raw, media_type=media_type)
    except (ContentPartError, ValueError):
        return None


def _content(result: Any) -> Any:
    structured = getattr(result, "structured_content", None)
    if structured is not None and not getattr(result, "is_error", False):
        return structured
    blocks = [_block(b) for b in (getattr(result, "content", None) or [])]
    if len(blocks) == 1 and isinstance(blocks[0], str):
        text = blocks[0]
        if text[:1] in "{[":
            try:
                return json.loads(text)
            except (ValueError, RecursionError):
                return text
        return text
    if not blocks:
        return None
    return blocks


def _error_text(content: Any) -> str:
    if isinstance(content, str):
        return content or "the tool reported an error and said nothing more"
    if isinstance(content, list) and all(isinstance(c, str) for c in content):
        return "\n".join(content)
    return json.dumps(content, ensure_ascii=False)


def _cut(text: str, limit: int) -> str:
    return f"{text[:limit]}\n[cut: the result was {len(text):,} characters; the first {limit:,} are shown]"


def answer_of(result: Any, *, secrets: Secrets, limit: int = DEFAULT_MAX_RESULT_CHARS) -> Answer:
    """
    The safe form of a ``CallToolResult``: redacted, cut to ``limit`` characters, JSON data or text.

    The content is passed through its JSON text once: that is where secrets
    are redacted (in any string, however deeply nested) and the size is
    measured, and reading it back yields plain JSON data. Then, in a list of
    blocks, each image or PDF's placeholder is replaced by the :class:`Image`
    or :class:`File` it stands for, which the engine sends on to the model.
    """
    ok = not getattr(result, "is_error", False)
    try:
        content = _content(result)
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        content, text = None, "the server's result could not be read as JSON data (too deep, or not data)"
        ok = False
    if not ok:
        message = secrets.text(_error_text(content) if content is not None else text)
        return Answer(False, message if len(message) <= limit else _cut(message, limit))
    if isinstance(content, str):
        redacted = secrets.text(content)
        return Answer(True, redacted if len(redacted) <= limit else _cut(redacted, limit))
    redacted = secrets.text(text)  # JSON-escaped forms of the secrets are among them (see Secrets.of)
    if len(redacted) > limit:
        return Answer(True, _cut(redacted, limit))
    if redacted != text:
        try:
            content = json.loads(redacted)
        except (ValueError, RecursionError):  # a redaction inside an escape sequence: keep the text
            content = redacted
    return Answer(True, _with_media(content, result))


def _with_media(content: Any, result: Any) -> Any:
    # Each image or PDF block's placeholder, in a list of blocks, becomes the Image or File itself, while their
    # bytes together stay within MAX_PART_BYTES: a server cannot fill the transcript with many large images.
    blocks = getattr(result, "content", None) or []
    if type(content) is not list or len(content) != len(blocks) or getattr(result, "structured_content", None):
        return content
    out: list[Any] = []
    room = MAX_PART_BYTES
    for shown, media in zip(content, map(_media, blocks), strict=True):
        size = _size(media.part["data"]) if media is not None else 0
        if media is not None and size <= room:
            out.append(media)
            room -= size
        else:
            out.append(shown)
    return out
