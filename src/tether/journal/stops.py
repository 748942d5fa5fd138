"""The typed stop reason of a journaled budget error, for journals of every age.

Errors journaled since `StopReason` carry it in `reason`. Earlier journals left `reason` empty for most
budget stops and said which in the message; this module is the one place that reads those old wordings,
so replay decides as it did when they were written. Nothing else may branch on an error's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.contracts.stops import StopReason

_LEGACY_WORDINGS: tuple[tuple[str, str, StopReason], ...] = (
    # (how the old message was matched, the text, the reason it meant), first match wins
    ("prefix", "in-flight exposure cap", StopReason.EXPOSURE_CAP),
    ("prefix", "exposure drained", StopReason.EXPOSURE_DRAINED),
    ("suffix", "provider cancelled", StopReason.PROVIDER_CANCELLED),
    ("within", "tree token ceiling", StopReason.TOKEN_CEILING),
    ("within", "'tree tokens'", StopReason.TOKEN_CEILING),
    ("prefix", "output floor unaffordable", StopReason.OUTPUT_FLOOR),
    ("prefix", "budget exhausted: scope", StopReason.TENANT_BUDGET),
    ("prefix", "hard ceiling:", StopReason.IN_FLIGHT),
)


def stop_reason(kind: object, reason: object, message: object) -> StopReason | None:
    """The `StopReason` of an error with this kind, reason and message (None unless `kind` is `budget`)."""
    if kind != "budget":
        return None
    return StopReason.parse(reason) or legacy_stop_reason(str(message or ""))


def error_stop_reason(error: Mapping[str, Any] | None) -> StopReason | None:
    """`stop_reason` of a journaled error dict (a terminal's `error`)."""
    if not error:
        return None
    return stop_reason(error.get("kind"), error.get("reason"), error.get("message"))


def legacy_stop_reason(message: str) -> StopReason:
    """What a budget error written before typed stops meant, from its wording (a USD ceiling otherwise)."""
    for how, text, meant in _LEGACY_WORDINGS:
        if (
            (how == "prefix" and message.startswith(text))
            or (how == "suffix" and message.endswith(text))
            or (how == "within" and text in message)
        ):
            return meant
    return StopReason.USD_CEILING
