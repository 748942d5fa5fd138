"""Compaction: keeping an agent's conversation inside its window, as its `Context` policy says.

A compaction keeps the first user message and the last exchanges (an exchange starts at an assistant message,
so a tool call is never parted from its results) and replaces what lies between with one user note: a summary
the agent's model writes (`summarize`) or a line saying what was dropped (`drop-oldest`). Every compaction is a
journaled `context-compaction` decision (its cut, and the summary); a resume reads it back and rebuilds the same
messages without calling the model again. The summarize call is a dispatch like any other (admitted, priced,
drawn), tagged `compaction` so the cost report lists it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from tether.agents.context import Context, cut_text
from tether.agents.dispatch import Dispatcher, TurnResult, budget_error, estimate_prompt_tokens
from tether.agents.host import AgentSpec, LoopHost, ResolvedModel
from tether.agents.state import LoopState
from tether.contracts.errors import BudgetExhaustedError
from tether.contracts.messages import Message, TextPart, ToolCallPart, ToolResultPart
from tether.contracts.protocols import BudgetHooks
from tether.contracts.signal import Signal
from tether.journal.canonical import canonical_json
from tether.journal.cost import COMPACTION_PURPOSE

COMPACTION_DECISION = "context-compaction"
SUMMARY_SYSTEM = (
    "You compress an agent's conversation so it can go on within its context window. Summarize the conversation "
    "below: keep every fact, number, name, decision, tool finding and open question the agent still needs; drop "
    "pleasantries and repetition. Write plain text, no preamble."
)
Why = Literal["limit", "overflow"]


def exchange_starts(messages: list[Message]) -> list[int]:
    """Where exchanges start: every assistant message after the first (the prompt) one."""
    return [i for i, m in enumerate(messages) if i > 0 and m.role == "assistant"]


def render_span(messages: list[Message]) -> str:
    """Messages as plain text for the summarize call (raw provider parts left out)."""
    lines: list[str] = []
    for m in messages:
        for part in m.parts:
            if isinstance(part, TextPart):
                lines.append(f"{m.role}: {part.text}")
            elif isinstance(part, ToolCallPart):
                lines.append(f"assistant called {part.name}({canonical_json(part.args).decode()})")
            elif isinstance(part, ToolResultPart):
                lines.append(f"{part.name} {'failed' if part.is_error else 'returned'}: {part.content}")
    return "\n".join(lines)


def note_for(strategy: str, dropped: int, summary: str | None) -> Message:
    """The user note that stands for the compacted span."""
    if summary is not None:
        return Message.text("user", f"[Summary of the {dropped} earlier messages, compacted to fit the context "
                                    f"window]\n{summary}")
    return Message.text("user", f"[{dropped} earlier messages were dropped to fit the context window.]")


class Compactor:
    """Runs one invocation's `Context` policy for the loop: `fit` before a turn, `compact` on an overflow."""

    __slots__ = ("context", "hooks", "host", "signal", "spec", "state")

    def __init__(self, spec: AgentSpec, context: Context, host: LoopHost, hooks: BudgetHooks, state: LoopState,
                 signal: Signal | None) -> None:
        self.spec, self.context, self.host, self.hooks, self.state, self.signal = (
            spec, context, host, hooks, state, signal)

    def model(self) -> ResolvedModel:
        return self.spec.models[min(self.state.model_index, len(self.spec.models) - 1)]

    def limit(self, model: ResolvedModel) -> int:
        """The input tokens a request may carry: the policy's, else the window less the call's output limit."""
        if self.context.max_input_tokens is not None:
            return self.context.max_input_tokens
        caps = model.adapter.caps(model.name)
        output = caps.max_output_tokens if self.spec.max_output_tokens is None else min(
            self.spec.max_output_tokens, caps.max_output_tokens)
        return max(64, caps.context_window - output)

    def estimate(self, messages: list[Message]) -> int:
        return estimate_prompt_tokens(self.spec, self.model(), messages)

    async def fit(self) -> TurnResult | None:
        """Compact when the next request would pass the limit; a summarize call that failed is returned."""
        if self.state.pending is not None:
            return None
        est = self.estimate(self.state.messages)
        limit = self.limit(self.model())
        if est <= limit:
            return None
        return await self.compact("limit", limit)

    async def compact(self, why: Why, target: int | None = None) -> TurnResult | None:
        """One compaction (read back from the journal when it holds it) toward `target` input tokens."""
        state = self.state
        n = state.compactions + 1
        recorded = await self._recorded(n)
        if recorded is not None and int(recorded.get("messages", -1)) == len(state.messages):
            self._apply(recorded)
            await self.host.save_checkpoint(state)
            return None
        limit = self.limit(self.model()) if target is None else target
        cut = self._cut(limit)
        if cut is None:
            return None  # nothing older than the kept exchanges: the request goes as it is
        summary: str | None = None
        calls = 0
        if self.context.strategy == "summarize":
            got = await self._summarize(state.messages[1:cut], self.limit(self.model()))
            if isinstance(got, TurnResult):
                return got
            summary, calls = got
            await self.host.save_checkpoint(state)  # the summary call's draw, before the decision that uses it
        payload: dict[str, Any] = {
            "n": n, "why": why, "strategy": self.context.strategy, "messages": len(state.messages), "cut": cut,
            "est_before": self.estimate(state.messages), "summary": summary, "calls": calls,
        }
        decided = await self.host.decide(COMPACTION_DECISION, payload)
        self._apply(decided if int(decided.get("messages", -1)) == len(state.messages) else payload)
        await self.host.save_checkpoint(state)
        return None

    async def _recorded(self, n: int) -> dict[str, Any] | None:
        """Compaction `n` as the journal holds it (earlier ones, already in the checkpoint, are passed over)."""
        while True:
            got = await self.host.recorded(COMPACTION_DECISION)
            if got is None:
                return None
            at = int(got.get("n", 0))
            if at >= n:
                return got if at == n else None

    def _apply(self, payload: dict[str, Any]) -> None:
        state = self.state
        cut = int(payload["cut"])
        summary = payload.get("summary")
        note = note_for(str(payload.get("strategy")), cut - 1, summary if isinstance(summary, str) else None)
        state.messages = [state.messages[0], note, *state.messages[cut:]]
        state.compactions = int(payload.get("n", state.compactions + 1))
        self.spec.measured.clear()  # the sizes cache holds what it measured: let the dropped messages go

    def _cut(self, limit: int) -> int | None:
        """Where the kept tail starts: the last `keep_last` exchanges, fewer when those do not fit `limit`."""
        messages = self.state.messages
        starts = exchange_starts(messages)
        floor = 2 if self.state.compactions else 1  # past the prompt (and an earlier compaction's note)
        allowance = self.context.summary_max_tokens if self.context.strategy == "summarize" else 0
        best: int | None = None
        for keep in range(min(self.context.keep_last, len(starts)), 0, -1):
            cut = starts[-keep]
            if cut <= floor:
                continue
            best = cut
            kept = [messages[0], note_for("drop-oldest", cut - 1, None), *messages[cut:]]
            if self.estimate(kept) + allowance <= limit:
                return cut
        return best

    async def _summarize(self, span: list[Message], limit: int) -> tuple[str, int] | TurnResult:
        """The summary of `span` (and the provider calls it took), or the turn result of a call that failed."""
        try:
            self.hooks.before_turn()
        except BudgetExhaustedError as exc:
            return TurnResult("error", error=budget_error(exc, "compaction"))
        spec = replace(self.spec, system=SUMMARY_SYSTEM, tools=(), output=None, tool_choice=None, tool_budget=None,
                       max_output_tokens=self.context.summary_max_tokens, opening=None, measured={})
        text = render_span(span)
        state = self.state
        sub = LoopState(messages=[Message.text("user", text)], turns=state.turns, provider_calls=state.provider_calls,
                        usage=state.usage, usage_by_model=dict(state.usage_by_model), served_by=state.served_by,
                        model_index=state.model_index)
        model = self.model()
        for _ in range(4):  # the summarize request itself must fit: cut the rendered span until it does
            over = estimate_prompt_tokens(spec, model, sub.messages) - limit
            if over <= 0:
                break
            text = cut_text(text, max(256, len(text) - over * 5), "the conversation")
            sub.messages = [Message.text("user", text)]
        dispatcher = Dispatcher(spec, self.host, self.hooks, sub, self.signal, purpose=COMPACTION_PURPOSE)
        turn = await dispatcher.turn("compaction")
        calls = sub.provider_calls - state.provider_calls
        state.provider_calls, state.usage, state.usage_by_model = sub.provider_calls, sub.usage, sub.usage_by_model
        state.served_by, state.model_index = sub.served_by, sub.model_index
        if turn.status != "ok" or turn.message is None:
            return turn
        return turn.message.text_content.strip(), calls
