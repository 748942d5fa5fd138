"""Project the canonical history for one provider: raw parts travel only to their own family."""

from __future__ import annotations

from collections.abc import Iterable

from tether.contracts.messages import Message, RawPart


def project_history(messages: Iterable[Message], family: str) -> tuple[Message, ...]:
    """Drop raw parts of other families; a message left with no parts is dropped too."""
    projected: list[Message] = []
    for message in messages:
        parts = tuple(p for p in message.parts if not isinstance(p, RawPart) or p.family == family)
        if len(parts) == len(message.parts):
            projected.append(message)
        elif parts:
            projected.append(message.model_copy(update={"parts": parts}))
    return tuple(projected)
