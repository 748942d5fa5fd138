"""Hand-written doubles of `LoopHost` and `BudgetHooks` for the agent-loop tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

from tether.agents.host import AgentSpec, ResolvedModel
from tether.agents.state import LoopState
from tether.contracts.errors import BudgetExhaustedError
from tether.contracts.events import AgentScoped
from tether.contracts.protocols import ExposureWait
from tether.contracts.signal import Signal
from tether.contracts.usage import Usage
from tether.models.fake import FakeModel
from tether.tools.definition import Tool


class Suspended(Exception):
    """What the host double raises from `approve` when no answer is scripted (a suspension)."""


class HostDouble:
    """In-memory checkpoints (round-tripped through JSON), scripted approvals, direct tool calls."""

    def __init__(
        self,
        *,
        checkpoint: LoopState | None = None,
        approvals: dict[str, bool] | None = None,
        on_emit: Callable[[str, AgentScoped], None] | None = None,
    ) -> None:
        self.run_id = "run-test"
        self.stored = checkpoint
        self.saved: list[LoopState] = []
        self.approvals = dict(approvals or {})
        self.approve_calls: list[tuple[str, dict[str, Any], LoopState | None]] = []
        self.executed: list[tuple[str, dict[str, Any], str, int]] = []
        self.events: list[tuple[str, AgentScoped]] = []
        self.sleeps: list[float] = []
        self.decisions: dict[str, dict[str, Any]] = {}
        self.dispatches: list[tuple[str, int, int]] = []
        self.purposes: list[tuple[int, str]] = []
        self.ended: list[tuple[int, bool]] = []
        self._on_emit = on_emit

    async def load_checkpoint(self) -> LoopState | None:
        return None if self.stored is None else LoopState.model_validate_json(self.stored.model_dump_json())

    async def save_checkpoint(self, state: LoopState) -> None:
        snapshot = LoopState.model_validate_json(state.model_dump_json())
        self.saved.append(snapshot)
        self.stored = snapshot

    async def decide(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        return self.decisions.setdefault(name, payload)

    async def record_dispatch(self, served_by: str, est_input: int, max_output: int, *,
                              purpose: str | None = None) -> None:
        self.dispatches.append((served_by, est_input, max_output))
        if purpose is not None:
            self.purposes.append((len(self.dispatches), purpose))

    async def recorded(self, name: str) -> dict[str, Any] | None:
        return None

    async def end_attempt(self, turn: int, *, reached: bool) -> None:
        self.ended.append((turn, reached))

    async def approve(self, tool: str, args: dict[str, Any]) -> bool:
        self.approve_calls.append((tool, args, self.stored))
        if tool not in self.approvals:
            raise Suspended(tool)
        return self.approvals[tool]

    async def execute_tool(
        self, tool: Tool, args: dict[str, Any], *, call_id: str, ordinal: int
    ) -> Any:
        self.executed.append((tool.name, args, call_id, ordinal))
        return await tool.call(args)

    def emit(self, event: AgentScoped, /) -> None:
        self.events.append((event.type, event))
        if self._on_emit is not None:
            self._on_emit(event.type, event)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def of_type(self, type: str) -> list[Any]:
        """The typed events of one type, in order."""
        return [event for t, event in self.events if t == type]


class JournalHost(HostDouble):
    """A host whose decisions behave like the journal: ordered, matched first-unconsumed, replayed."""

    def __init__(self, *, journal: list[tuple[str, dict[str, Any]]] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.journal: list[tuple[str, dict[str, Any]]] = journal if journal is not None else []
        self.consumed: set[int] = set()
        self.appended: list[str] = []
        self.order: list[str] = []

    async def decide(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        self.order.append(f"decide:{name}")
        for i, (n, p) in enumerate(self.journal):
            if n == name and i not in self.consumed:
                self.consumed.add(i)
                return dict(p)
        self.journal.append((name, json.loads(json.dumps(payload))))
        self.consumed.add(len(self.journal) - 1)
        self.appended.append(name)
        return payload

    async def recorded(self, name: str) -> dict[str, Any] | None:
        for i, (n, p) in enumerate(self.journal):
            if n == name and i not in self.consumed:
                self.consumed.add(i)
                return dict(p)
        return None

    async def execute_tool(self, tool: Any, args: dict[str, Any], *, call_id: str, ordinal: int) -> Any:
        self.order.append(f"run:{tool.name}")
        return await super().execute_tool(tool, args, call_id=call_id, ordinal=ordinal)

    def resumed(self) -> JournalHost:
        """The next process: the same journal and the last checkpoint, nothing consumed yet."""
        return JournalHost(journal=self.journal, checkpoint=self.stored)

    def decided(self, name: str) -> list[dict[str, Any]]:
        return [p for n, p in self.journal if n == name]


class HooksDouble:
    """A budget double: scripted refusals and clamps, a call meter that can fire the cut signal."""

    def __init__(
        self,
        *,
        affordable: int | None = None,
        exposure: int | None = None,
        refuse_on_turn: int | None = None,
        refusal_reason: str | None = None,
        cut_at_output: int | None = None,
        with_meter: bool = True,
        pricing_error: Exception | None = None,
    ) -> None:
        self.signal: Signal | None = Signal()
        self.affordable = affordable
        self.exposure = exposure
        self.refuse_on_turn = refuse_on_turn
        self.refusal_reason = refusal_reason
        self.cut_at_output = cut_at_output
        self.with_meter = with_meter
        self.pricing_error = pricing_error
        self.turns = 0
        self.metered: list[tuple[str, Usage]] = []
        self.on_usage_calls: list[tuple[str, Usage]] = []
        self.admitted: list[tuple[str, int, int]] = []
        self.released = 0

    def before_turn(self) -> None:
        self.turns += 1
        if self.refuse_on_turn is not None and self.turns >= self.refuse_on_turn:
            data = {"reason": self.refusal_reason} if self.refusal_reason else {}
            raise BudgetExhaustedError("budget exhausted: ceiling reached", **data)

    def max_affordable_output_tokens(self, served_by: str, est_input: int) -> int | None:
        return self.affordable

    def limited_by(self) -> Literal["usd", "tokens"] | None:
        return None if self.affordable is None else "usd"

    def max_exposure_output_tokens(self, served_by: str, est_input: int) -> int | None:
        return self.exposure

    def admit_turn_exposure(
        self, served_by: str, est_input: int, planned_output: int
    ) -> Callable[[], None] | None:
        self.admitted.append((served_by, est_input, planned_output))

        def release() -> None:
            self.released += 1

        return release

    async def await_exposure_release(self, signal: Signal | None = None) -> ExposureWait:
        return "drained"

    def live_exposure_usd(self) -> float:
        return 0.0

    def open_call_meter(self, served_by: str) -> Callable[[Usage], None] | None:
        if not self.with_meter:
            return None

        def feed(delta: Usage) -> None:
            self.metered.append((served_by, delta))
            out = sum(u.output_tokens for _, u in self.metered)
            if self.cut_at_output is not None and out >= self.cut_at_output and self.signal:
                self.signal.abort("ceiling reached")

        return feed

    def remaining_usd(self) -> float | None:
        return None

    def assert_priced_dispatch(self, served_by: str) -> None:
        if self.pricing_error is not None:
            raise self.pricing_error

    def on_usage(self, usage: Usage, served_by: str) -> None:
        self.on_usage_calls.append((served_by, usage))

    def metered_total(self) -> Usage:
        total = Usage()
        for _, u in self.metered + self.on_usage_calls:
            total = total + u
        return total


def make_spec(*models: FakeModel | tuple[FakeModel, str], **kwargs: Any) -> AgentSpec:
    """An `AgentSpec` over fake models (`model` or `(model, name)`), prompt "hi" by default."""
    resolved: list[ResolvedModel] = []
    for item in models:
        fake, name = item if isinstance(item, tuple) else (item, "m")
        resolved.append(ResolvedModel(ref=f"{fake.id}:{name}", adapter=fake, name=name))
    kwargs.setdefault("prompt", "hi")
    return AgentSpec(models=resolved, **kwargs)


def tool_results(messages: Sequence[Any]) -> list[Any]:
    """Every tool result part in a request's messages, in order."""
    return [p for m in messages if m.role == "tool" for p in m.parts]
