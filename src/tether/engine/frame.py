"""Where the running code is: its scope path, phase, budget account and agent parent."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from tether.budget.accounts import Account


@dataclass(frozen=True)
class Frame:
    """Per-branch position. Scope comes from call structure only; phase never changes identity."""

    scope: str
    account: Account
    phase: str | None = None
    agent_id: int | None = None
    depth: int = 0
    workflow: str = ""
    span_id: str = "run"
    """The innermost telemetry span (`run`, `phase-<n>`, `child-<seq>`, `agent-<seq>`, a tool call's)."""

    def enter(self, scope: str, **changes: object) -> Frame:
        # As `dataclasses.replace` does, minus its walk over the fields (a frame is entered per agent).
        return type(self)(**{**self.__dict__, "scope": scope, **changes})


# One context variable for the process; its *values* are per task, so concurrent runs never share.
CURRENT_FRAME: ContextVar[Frame] = ContextVar("tether_frame")
