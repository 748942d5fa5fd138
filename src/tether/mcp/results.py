"""An MCP `tools/call` result as what the model reads: text, structured content, placeholders.

tether's tool results are text (every adapter sends a string back to its provider), so images,
audio and binary resources become one-line placeholders naming their type and size; embedded
text resources are inlined. Structured content is the result when the server sent no text
(servers that send both put the same JSON in the text, by the protocol's advice).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from mcp_types import CallToolResult, ContentBlock


@dataclass(frozen=True)
class CallOutcome:
    """One call's outcome as the effect ledger records it (`ok` | `error` | `timeout`)."""

    outcome: Literal["ok", "error", "timeout"]
    value: Any = None
    error: str | None = None


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
