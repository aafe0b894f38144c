"""
The pinned corpus of the retrieval example: passages named by content hash, and read handles issued by search.

Every passage carries the SHA-256 of its text and the corpus is named by the
hash of all of them. A search issues one read handle per hit; ``read``
accepts only a handle this corpus issued, unchanged, for the corpus as it is
now, and re-checks the passage's hash before returning it. A refused read
carries a typed category (``{"error": "invalid_read"}``) the controller reads.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Sequence
from typing import Any

from agent_fsm.engine import ToolCall, ToolError, ToolSpec, Verdict

__all__ = ["PASSAGES", "VERSION", "PinnedCorpus"]

VERSION = "2.4"
"""The one documentation version the corpus holds."""

PASSAGES: tuple[tuple[str, str], ...] = (
    ("get-basic", "Store.get(key) returns the stored value for key, or raises KeyError when the key is absent."),
    ("put-basic", "Store.put(key, value) saves value under key and returns the new revision number."),
    (
        "put-existing",
        (
            "When key already exists, Store.put replaces the stored value and bumps the revision; "
            "the previous value survives only if history is enabled."
        ),
    ),
    ("get-default", "Store.get(key, default) returns default instead of raising when the key is absent."),
    ("delete", "Store.delete(key) removes key and returns True; an absent key returns False."),
    ("ttl", "Store.put(key, value, ttl=seconds) expires the entry after that many seconds."),
)
"""The pinned documentation of the fictional ``quill`` store, version 2.4: (source id, text)."""


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _invalid_read(detail: str) -> ToolError:
    # The category is data the controller reads; the words are for people.
    return ToolError(f"invalid_read: {detail}", data={"error": "invalid_read", "detail": detail})


class PinnedCorpus:
    """
    Passages named by content hash, a corpus id over all of them, and the read handles issued by search.

    ``query_history`` keeps every query searched, in order; a later query
    never overwrites an earlier one.
    """

    def __init__(self, passages: Sequence[tuple[str, str]] = PASSAGES) -> None:
        self.query_history: list[str] = []
        self._issued: dict[str, dict[str, Any]] = {}
        self.publish(passages)

    def publish(self, passages: Sequence[tuple[str, str]]) -> None:
        """Replace the corpus; handles issued for the old one become stale."""
        self.passages = {
            source: {"source_id": source, "text": text, "text_sha256": _sha256(text)} for source, text in passages
        }
        canonical = json.dumps(sorted((s, p["text_sha256"]) for s, p in self.passages.items()))
        self.corpus_id = _sha256(canonical)

    def search(self, query: str, k: int = 2) -> dict[str, Any]:
        """The ``k`` passages using ``query`` most often, each with a read handle."""
        self.query_history.append(query)
        ranked: list[tuple[int, int, dict[str, Any]]] = []
        for order, passage in enumerate(self.passages.values()):
            hits = re.findall(r"[a-z0-9]+", passage["text"].casefold()).count(query)
            if hits:
                ranked.append((-hits, order, passage))
        results = []
        for rank, (_, _, passage) in enumerate(sorted(ranked, key=lambda r: r[:2])[:k], start=1):
            handle: dict[str, Any] = {
                "corpus_id": self.corpus_id,
                "source_id": passage["source_id"],
                "version": VERSION,
                "text_sha256": passage["text_sha256"],
                "rank": rank,
                "read_token": secrets.token_hex(16),
            }
            self._issued[handle["read_token"]] = dict(handle)
            results.append(handle)
        return {"corpus_id": self.corpus_id, "query": query, "results": results}

    def read(self, handle: dict[str, Any]) -> dict[str, Any]:
        """
        The passage behind an issued handle, its hash re-checked.

        Raises:
            ToolError: the handle was never issued, was altered, is stale, or the text changed.
        """
        issued = self._issued.get(handle["read_token"])
        if issued is None:
            raise _invalid_read("this read_token was never issued by search")
        if issued != handle:
            changed = sorted(k for k in handle if handle[k] != issued.get(k))
            raise _invalid_read(f"the handle was altered after it was issued ({', '.join(changed)})")
        if handle["corpus_id"] != self.corpus_id:
            raise _invalid_read("the handle is stale; the corpus was republished since it was issued")
        passage = self.passages[handle["source_id"]]
        if _sha256(passage["text"]) != handle["text_sha256"]:
            raise _invalid_read("the passage text no longer matches its hash")
        return {**handle, "text": passage["text"]}

    def tools(self) -> dict[str, ToolSpec]:
        """``search`` and ``read``, with exact contracts (a handle has exactly its issued fields)."""
        hex64 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
        handle = {
            "type": "object",
            "properties": {
                "corpus_id": hex64,
                "source_id": {"type": "string", "pattern": "^[a-z0-9-]{1,64}$"},
                "version": {"const": VERSION},
                "text_sha256": hex64,
                "rank": {"type": "integer", "minimum": 1, "maximum": 3},
                "read_token": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
            },
            "required": ["corpus_id", "source_id", "version", "text_sha256", "rank", "read_token"],
            "additionalProperties": False,
        }
        return {
            "search": ToolSpec(
                "Search the pinned corpus for one lowercase word; returns up to k passages with read handles.",
                {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "pattern": "^[a-z0-9]{1,64}$"},
                        "k": {"type": "integer", "minimum": 1, "maximum": 3},
                    },
                    "required": ["query", "k"],
                    "additionalProperties": False,
                },
                self.search,
            ),
            "read": ToolSpec(
                "Read the passage behind a handle issued by search.",
                {
                    "type": "object",
                    "properties": {"handle": handle},
                    "required": ["handle"],
                    "additionalProperties": False,
                },
                self.read,
            ),
        }

    def distinct_queries(self, call: ToolCall) -> Verdict:
        """
        A gate refusing a query already searched: a second line only, for a policy without the controller's rule.

        The controller itself stops ``duplicate_query`` before proposing a repeat.
        """
        if call.name == "search" and call.arguments and call.arguments.get("query") in self.query_history:
            return Verdict.deny(f"duplicate_query: {call.arguments['query']!r} was already searched")
        return Verdict.allow("effect-free tool")
