"""An MCP `tools/call` result as what the model reads: text, structured content, placeholders.

tether's tool results are text (every adapter sends a string back to its provider), so images,
audio and binary resources become one-line placeholders naming their type and size; embedded
text resources are inlined. Structured content is the result when the server sent no text
(servers that send both put the same JSON in the text, by the protocol's advice).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from mcp_types import CallToolResult, ContentBlock

    from tether.contracts.protocols import LimitName


@dataclass(frozen=True)
class CallOutcome:
    """One call's outcome as the effect ledger records it (`ok` | `error` | `timeout`)."""

    outcome: Literal["ok", "error", "timeout"]
    value: Any = None
    error: str | None = None
    limit: LimitName | None = None
    """The cap the call hit (`max_result_bytes`), if one did."""


def result_size(result: CallToolResult, cap: int | None = None) -> int:
    """The bytes a result holds: text as UTF-8, media and blobs as their base64 data, structured content as
    compact JSON; counting stops once it passes `cap` (so a huge structured value is never encoded whole)."""
    total = 0
    for block in result.content:
        total += sum(_utf8_len(s) for s in _strings(block))
        if cap is not None and total > cap:
            return total
    if result.structured_content is not None:
        encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
        for chunk in encoder.iterencode(result.structured_content):  # chunk by chunk, never the whole text
            total += _utf8_len(chunk)
            if cap is not None and total > cap:
                break
    return total


def _strings(block: ContentBlock) -> list[str]:
    """The payload strings of one content block (what its size is made of)."""
    from mcp_types import AudioContent, BlobResourceContents, EmbeddedResource, ImageContent, TextContent

    if isinstance(block, TextContent):
        return [block.text]
    if isinstance(block, ImageContent | AudioContent):
        return [block.data]
    if isinstance(block, EmbeddedResource):
        res = block.resource
        return [res.blob if isinstance(res, BlobResourceContents) else res.text]
    return []


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", errors="replace"))


def outcome_of(result: CallToolResult) -> CallOutcome:
    """`isError` results become errors the model sees; the rest become the tool's value."""
    parts = [render_part(block) for block in result.content]
    text = "\n".join(p for p in parts if p)
    if result.is_error:
        return CallOutcome("error", error=text or "the MCP tool reported an error without a message")
    if not text and result.structured_content is not None:
        return CallOutcome("ok", value=result.structured_content)
    return CallOutcome("ok", value=text)


def render_part(block: ContentBlock) -> str:
    """One content block as text; non-text media as a placeholder the model can reason about."""
    from mcp_types import (
        AudioContent,
        BlobResourceContents,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
    )

    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        return f"[{block.type}: {block.mime_type}, {_size(block.data)} bytes, not shown to the model]"
    if isinstance(block, ResourceLink):
        mime = f", {block.mime_type}" if block.mime_type else ""
        return f"[resource link: {block.uri} ({block.name}{mime})]"
    if isinstance(block, EmbeddedResource):
        res = block.resource
        mime = f", {res.mime_type}" if res.mime_type else ""
        if isinstance(res, BlobResourceContents):
            return f"[resource: {res.uri}{mime}, {_size(res.blob)} bytes, not shown to the model]"
        return f"[resource: {res.uri}{mime}]\n{res.text}"
    return f"[{getattr(block, 'type', 'content')} block, not shown to the model]"


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)
