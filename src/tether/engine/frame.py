"""Where the running code is: its scope path, phase, budget account and agent parent."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from tether.budget.accounts import Account


@dataclass(frozen=True, slots=True)
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

    def enter(
        self, scope: str, *, account: Account | None = None, phase: str | None = None, agent_id: int | None = None,
        depth: int | None = None, workflow: str | None = None, span_id: str | None = None,
    ) -> Frame:
        """This frame at `scope`, with the fields given changed (None keeps a field as it is)."""
        return Frame(
            scope,
            self.account if account is None else account,
            self.phase if phase is None else phase,
            self.agent_id if agent_id is None else agent_id,
            self.depth if depth is None else depth,
            self.workflow if workflow is None else workflow,
            self.span_id if span_id is None else span_id,
        )


# One context variable for the process; its *values* are per task, so concurrent runs never share.
CURRENT_FRAME: ContextVar[Frame] = ContextVar("tether_frame")
