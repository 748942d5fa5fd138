"""Running one turn's tool calls: validation, the permission chain, the tool budget, approvals, execution.

Calls run in order; consecutive `parallel_safe` calls run concurrently (sync tools too: the host runs
them off the loop), results kept in call order. A call that overran its `timeout_s` gets a typed
"[timeout]" result.
Every failure becomes an error tool result the model can recover from; none fails the agent. A tool
budget expiry stops the batch: the calls not executed get typed "skipped" results.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from tether.agents.context import cut_text
from tether.agents.host import AgentSpec, LoopHost
from tether.agents.state import LoopState, PendingBatch
from tether.agents.tool_budget import ToolBudgetGate
from tether.contracts.errors import NonSerializableValueError
from tether.contracts.events import ToolEnd, ToolStart
from tether.contracts.messages import Message, ToolCallPart, ToolResultPart
from tether.journal.canonical import canonical_json, to_jsonable
from tether.tools.definition import ModelRetry, Tool, ToolArgsError, ToolExecutionError, format_issue
from tether.tools.permissions import Permissions

_Ready = tuple[int, ToolCallPart, Tool, dict[str, Any]]
TOOL_RESULT_CUT = "tool-result-cut"
"""The decision that journals a tool result whole before the model sees it cut (`Context.max_tool_result_tokens`)."""


_DEFAULT_PERMISSIONS = Permissions()
"""The default permissions (frozen: one for every invocation that sets none)."""

class ToolRunner:
    """Completes `state.pending`: a resumed batch skips every call that already has a result."""

    __slots__ = ("cap", "gate", "host", "permissions", "state", "tools")

    def __init__(self, spec: AgentSpec, host: LoopHost, state: LoopState, gate: ToolBudgetGate) -> None:
        self.host, self.state, self.gate = host, state, gate
        self.tools = {t.name: t for t in spec.tools}
        self.permissions = spec.permissions or _DEFAULT_PERMISSIONS
        self.cap = spec.context.max_tool_result_tokens if spec.context is not None else None
        """Tool results past this many tokens are journaled whole and shown cut (`Context.max_tool_result_tokens`)."""

    async def run_pending(self) -> None:
        """Run the pending batch to the end, append the tool message and clear the batch."""
        pending = self.state.pending
        assert pending is not None
        groups = self._groups(pending.calls)
        for position, group in enumerate(groups):
            if self.gate.expired:
                break
            executed = await self._run_group(pending, group)
            if executed and position + 1 < len(groups) and not self.gate.expired:
                # Executed effects are checkpointed before the next group: never re-run on resume.
                await self.host.save_checkpoint(self.state)
        if self.gate.expired:
            for call in pending.calls:
                if call.id not in pending.results:
                    pending.results[call.id] = self.gate.skipped(call)
                    self._emit_unexecuted(call, outcome="skipped", guard=self.gate.expired)
        note = await self.gate.batch_note()
        results = tuple(pending.results[c.id] for c in pending.calls)
        self.state.messages.append(Message(role="tool", parts=results))
        if note is not None:
            # After the results, so it rides this batch's checkpoint and never fires again (SPEC §6).
            self.state.messages.append(Message.text("user", note))
        self.state.pending = None

    def _groups(self, calls: Sequence[ToolCallPart]) -> list[list[tuple[int, ToolCallPart]]]:
        """Consecutive `parallel_safe` calls share a group; every other call is a group of one."""
        groups: list[list[tuple[int, ToolCallPart]]] = []
        previous_parallel = False
        for index, call in enumerate(calls):
            tool = self.tools.get(call.name)
            parallel = tool is not None and tool.parallel_safe
            if parallel and previous_parallel:
                groups[-1].append((index, call))
            else:
                groups.append([(index, call)])
            previous_parallel = parallel
        return groups

    async def _run_group(
        self, pending: PendingBatch, group: list[tuple[int, ToolCallPart]]
    ) -> bool:
        ready: list[_Ready] = []
        for index, call in group:
            if call.id in pending.results:
                continue
            prepared = await self._prepare(pending, call, [r[2] for r in ready])
            if prepared is not None:
                ready.append((index, call, *prepared))
            elif self.gate.expired:
                break  # the rest of the batch is not executed; calls admitted before still run
        if not ready:
            return False
        if len(ready) == 1:
            results = [await self._execute(pending, *ready[0])]
        else:
            async with asyncio.TaskGroup() as group_tasks:
                tasks = [group_tasks.create_task(self._execute(pending, *r)) for r in ready]
            results = [t.result() for t in tasks]
        for (_, call, _, _), result in zip(ready, results, strict=True):
            pending.results[call.id] = result
        return True

    async def _prepare(
        self, pending: PendingBatch, call: ToolCallPart, in_flight: list[Tool]
    ) -> tuple[Tool, dict[str, Any]] | None:
        """Validate, deny rules, the tool budget, then approval; a refusal records its result (None).

        The budget gate precedes the approval so no human is asked about a call the budget stops.
        """
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            self._refuse(pending, call, f"unknown tool '{call.name}' (available: {known})")
            return None
        try:
            args = tool.validate(call.args)
        except ToolArgsError as exc:
            listed = "; ".join(format_issue(i) for i in exc.issues)
            self._refuse(pending, call, f"invalid arguments for '{tool.name}': {listed}")
            return None
        verdict = self.permissions.decide(tool, args)
        if verdict.decision == "deny":
            self._refuse(pending, call, f"permission denied for '{tool.name}' ({verdict.reason})")
            return None
        gate = await self.gate.admit(tool, in_flight)
        if gate.action == "expire":
            return None
        if gate.action == "refuse":
            pending.results[call.id] = _error(call, gate.message)
            self._emit_unexecuted(call, outcome="refused", guard="finalization-window")
            return None
        if verdict.decision == "ask":
            approved = pending.approved.get(call.id)
            if approved is None:
                # The checkpoint precedes the suspension, so a resume continues this very batch.
                await self.host.save_checkpoint(self.state)
                approved = (await self.host.approve(tool.name, args)) is True
                pending.approved[call.id] = approved
            if not approved:
                self._refuse(pending, call, f"'{tool.name}' was not approved ({verdict.reason})")
                return None
        return tool, args

    def _refuse(self, pending: PendingBatch, call: ToolCallPart, message: str) -> None:
        pending.results[call.id] = _error(call, message)
        self.host.emit(ToolEnd(tool=call.name, call_id=call.id, is_error=True, executed=False, result=message[:1_000]))

    def _emit_unexecuted(self, call: ToolCallPart, *, outcome: str, guard: str) -> None:
        self.host.emit(ToolEnd(tool=call.name, call_id=call.id, is_error=True, executed=False, outcome=outcome,
                               guard=guard))

    async def _execute(
        self,
        pending: PendingBatch,
        index: int,
        call: ToolCallPart,
        tool: Tool,
        args: dict[str, Any],
    ) -> ToolResultPart:
        ordinal = pending.first_ordinal + index
        self.host.emit(ToolStart(tool=tool.name, call_id=call.id, ordinal=ordinal, args=_json_args(args)))
        self.gate.charge(tool)
        outcome = "error"
        try:
            value = await self.host.execute_tool(tool, args, call_id=call.id, ordinal=ordinal)
            text = render(value)
            if self.cap is not None and len(text) > self.cap * 4:
                text = await self._cut(call, text, self.cap * 4)
            result = ToolResultPart(call_id=call.id, name=call.name, content=text)
            outcome = "ok"
        except ModelRetry as exc:
            result = _error(call, str(exc))
        except ToolExecutionError as exc:
            outcome = exc.outcome
            if outcome == "timeout":  # typed, like "[effect unknown]": the model knows nothing came back
                result = _error(call, f"[timeout] {exc.message}")
            elif exc.limit is not None:  # `[max_memory_bytes] ...`: which resource cap stopped the call
                result = _error(call, exc.message)
            else:
                result = _error(call, f"tool '{tool.name}' failed: {type(exc).__name__}: {exc}")
        except Exception as exc:
            result = _error(call, f"tool '{tool.name}' failed: {type(exc).__name__}: {exc}")
        self.host.emit(ToolEnd(tool=tool.name, call_id=call.id, ordinal=ordinal, is_error=result.is_error,
                               executed=True, outcome=outcome, result=result.content[:1_000]))
        return result


    async def _cut(self, call: ToolCallPart, text: str, chars: int) -> str:
        """A result past the cap: journaled whole (a `tool-result-cut` decision), shown to the model cut.

        On resume the decisions of results the checkpoint holds are passed over; a call that ran before the crash
        and runs again finds its own and journals none."""
        while (got := await self.host.recorded(TOOL_RESULT_CUT)) is not None:
            if got.get("call_id") == call.id:
                break
        else:
            await self.host.decide(TOOL_RESULT_CUT, {"call_id": call.id, "tool": call.name, "chars": len(text),
                                                     "shown_chars": chars, "content": text})
        return cut_text(text, chars, f"this {call.name} result")


def _json_args(args: dict[str, Any]) -> dict[str, Any]:
    """The validated arguments as JSON for telemetry (a value JSON cannot hold becomes its text)."""
    try:
        data = to_jsonable(args)
    except NonSerializableValueError:
        return {k: str(v) for k, v in args.items()}
    return data if isinstance(data, dict) else {}


def _error(call: ToolCallPart, message: str) -> ToolResultPart:
    return ToolResultPart(call_id=call.id, name=call.name, content=message, is_error=True)


def render(value: Any) -> str:
    """A tool's return value as the text the model reads: strings as-is, the rest canonical JSON."""
    if isinstance(value, str):
        return value
    try:
        return canonical_json(value).decode()
    except NonSerializableValueError:
        return str(value)
