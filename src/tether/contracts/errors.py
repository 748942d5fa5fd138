"""The error taxonomy: every exception tether raises is a `TetherError` with a code, a retry hint and data."""

from __future__ import annotations

from typing import Any, ClassVar


class TetherError(Exception):
    """Base of every tether exception; `code` is stable, `data` carries the numbers behind the message."""

    code: ClassVar[str] = "tether-error"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = data

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.data))


def _rebuild(cls: type[TetherError], message: str, data: dict[str, Any]) -> TetherError:
    return cls(message, **data)


class ConfigError(TetherError):
    """The engine, a route, a store URL or an argument is misconfigured; nothing ran."""

    code = "config"


class NonSerializableValueError(TetherError):
    """A value that must be journaled is not JSON-serializable; nothing was journaled."""

    code = "non-serializable"


class JournalCompatibilityError(TetherError):
    """The journal was written by an incompatible version; the resume was refused before any effect."""

    code = "journal-compatibility"


class JournalMissError(TetherError):
    """A replay-strict run reached a call that the journal does not hold."""

    code = "journal-miss"


class JournalOrderViolation(TetherError):
    """An append broke the journal's order (stale seq, a ref to the future, a torn or corrupt record)."""

    code = "journal-order"


class JournalCorruptError(JournalOrderViolation):
    """A stored journal cannot be read back (garbage in the middle of a file, a bad row)."""

    code = "journal-corrupt"


class JournalSealedError(TetherError):
    """The run is settled; only resolutions and abandons may follow until a resume opens a segment."""

    code = "journal-sealed"


class BudgetExhaustedError(TetherError):
    """A ceiling refused an agent, a turn or a spawn before money was spent."""

    code = "budget-exhausted"


class AdmissionRejectedError(TetherError):
    """Admission refused an invocation for a reason other than money (spawn cap, containment)."""

    code = "admission-rejected"


class LeaseHeldError(TetherError):
    """Another driver holds this run's lease, or this driver's lease was lost (stale epoch)."""

    code = "lease-held"
    retryable = True


class RunHandedBackError(LeaseHeldError):
    """This driver handed the run back unsettled (a worker shutting down); its lease is released."""

    code = "handed-back"


class RunNotFoundError(TetherError):
    """No run with this id exists in the store (nothing was started, read or changed)."""

    code = "run-not-found"


class RunActiveError(TetherError):
    """A retention operation refused a run that is running, queued or suspended (it may still move or resume);
    `data["status"]` says which. Nothing was deleted: let it settle, cancel it, or pass `force`."""

    code = "run-active"


class RunRetainedError(TetherError):
    """A run whose payloads were removed (`data["decision"]`: `archive` or `redact`, at `data["seq"]`) cannot resume
    or be forked: its journal no longer holds the outputs a replay returns. Its record still verifies; start a new
    run for new work. Also raised when a redaction cannot be done without breaking the chain (`data["why"]`)."""

    code = "run-retained"


class StoreUnavailableError(TetherError):
    """The store could not be reached or used (lost connection, locked file); nothing was written."""

    code = "store-unavailable"
    retryable = True


class PricingError(TetherError):
    """A model has no valid price row and strict pricing forbids calling it."""

    code = "pricing"


class InvalidResolutionError(TetherError):
    """A value for a suspension does not match its declared schema; nothing was journaled.

    The suspension stays open: resolve it again with a valid value. `data["issues"]` lists what
    was wrong (pydantic's `loc`/`msg`/`type` shape), `data["key"]` and `data["run_id"]` say where.
    """

    code = "invalid-resolution"

    @property
    def issues(self) -> list[dict[str, Any]]:
        return list(self.data.get("issues", []))


class AgentCallError(TetherError):
    """`ctx.agent` failed; `.error` holds the journaled `AgentError` value."""

    code = "agent-call"

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message, **data)
        self.error = data.get("error")


__all__ = [
    "AdmissionRejectedError",
    "AgentCallError",
    "BudgetExhaustedError",
    "ConfigError",
    "InvalidResolutionError",
    "JournalCompatibilityError",
    "JournalCorruptError",
    "JournalMissError",
    "JournalOrderViolation",
    "JournalSealedError",
    "LeaseHeldError",
    "NonSerializableValueError",
    "PricingError",
    "RunHandedBackError",
    "RunNotFoundError",
    "StoreUnavailableError",
    "TetherError",
]
