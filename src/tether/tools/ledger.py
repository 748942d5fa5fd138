"""The effect ledger: an intent row before every tool dispatch and an outcome row after it.

Rows are plain dicts stored with `store.append_effect(run_id, row)`, tagged `phase: "intent"` or
`phase: "outcome"` and paired by `attempt_id`. They never contain the arguments, only
`args_hash`. The workdir is known at intent time because the ledger first asks a
`PreparingExecutor` to `prepare` the request (create the workdir, fix mounts), then writes the
intent naming it, then runs the prepared request; the outcome row repeats every intent field so
each row stands on its own. Both writes finish even if the caller is cancelled meanwhile.

A dispatch cancelled while the tool runs gets no outcome row: its effect is unknown, and
`orphans()` lists it (the engine then re-runs it only if the tool is idempotent). An executor
that raises instead of returning a result gets an `error` outcome row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ulid import ULID

from tether.contracts.errors import ConfigError
from tether.contracts.events import ToolEffectRecord
from tether.contracts.protocols import (
    ExecRequest,
    ExecResult,
    Executor,
    JournalStore,
    PreparingExecutor,
)
from tether.journal.canonical import canonical_json, content_key, sha256_hex
from tether.tools.executors._process import complete_despite_cancel, remove_workdir

INTENT_FIELDS = (
    "attempt_id",
    "idempotency_key",
    "run_id",
    "span_id",
    "tool",
    "args_hash",
    "executor",
    "workdir",
    "cwd",
    "work_mount",
    "started_at",
)
OUTCOME_FIELDS = ("outcome", "exit_code", "signal", "duration_ms")


def args_hash(args: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical JSON of a call's arguments."""
    return sha256_hex(canonical_json(dict(args)))


def idempotency_key(
    run_id: str, agent_seq: int, call_ordinal: int, tool: str, args: Mapping[str, Any]
) -> str:
    """The stable key of one tool call: the same call in the same agent slot on every resume."""
    return content_key(
        {
            "kind": "tool-effect",
            "run_id": run_id,
            "agent_seq": agent_seq,
            "call_ordinal": call_ordinal,
            "tool": tool,
            "args_hash": args_hash(args),
        }
    )


class EffectLedger:
    """Writes the two rows of every dispatch of one run; `clock` and `new_id` are injectable."""

    def __init__(
        self,
        store: JournalStore,
        run_id: str,
        *,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] = lambda: str(ULID()),
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.clock = clock
        self.new_id = new_id

    async def dispatch(
        self,
        executor: Executor,
        request: ExecRequest,
        fn: Callable[..., Any] | None = None,
        *,
        span_id: str,
        attempt_id: str | None = None,
    ) -> ExecResult:
        """Write the intent, run the call, write the outcome; returns the executor's result."""
        if not request.idempotency_key:
            raise ConfigError(
                f"tool {request.tool!r} dispatched without an idempotency key; derive one with "
                "tether.tools.ledger.idempotency_key(run_id, agent_seq, call_ordinal, tool, args)",
                tool=request.tool,
            )
        request = request.model_copy(update={"attempt_id": attempt_id or self.new_id()})
        prepared = isinstance(executor, PreparingExecutor) and not request.workdir
        if isinstance(executor, PreparingExecutor):
            request = executor.prepare(request)
        intent = self._intent(executor, request, span_id)
        try:
            await complete_despite_cancel(self.store.append_effect(self.run_id, intent))
        except BaseException:
            if prepared and request.workdir:
                remove_workdir(request.workdir)  # the effect never started
            raise
        started = time.perf_counter()
        try:
            result = await executor.run(request, fn)
        except Exception:
            elapsed = (time.perf_counter() - started) * 1000.0
            await self._write_outcome(intent, {"outcome": "error", "duration_ms": elapsed})
            raise
        await self._write_outcome(
            intent,
            {
                "workdir": result.workdir or intent["workdir"],
                "cwd": result.cwd if result.cwd is not None else intent["cwd"],
                "work_mount": result.work_mount or intent["work_mount"],
                "outcome": result.outcome,
                "exit_code": result.exit_code,
                "signal": result.signal,
                "duration_ms": result.duration_ms,
            },
        )
        return result

    def _intent(self, executor: Executor, request: ExecRequest, span_id: str) -> dict[str, Any]:
        return {
            "phase": "intent",
            "attempt_id": request.attempt_id,
            "idempotency_key": request.idempotency_key,
            "run_id": self.run_id,
            "span_id": span_id,
            "tool": request.tool,
            "args_hash": args_hash(request.args),
            "executor": executor.name,
            "workdir": request.workdir or "",
            "cwd": request.cwd,
            "work_mount": request.work_mount,
            "started_at": self.clock(),
        }

    async def _write_outcome(self, intent: Mapping[str, Any], fields: Mapping[str, Any]) -> None:
        row = {
            **intent,
            "phase": "outcome",
            "exit_code": None,
            "signal": None,
            "duration_ms": None,
            **fields,
        }
        await complete_despite_cancel(self.store.append_effect(self.run_id, row))

    async def records(self) -> list[ToolEffectRecord]:
        return await records(self.store, self.run_id)

    async def orphans(self) -> list[ToolEffectRecord]:
        return await orphans(self.store, self.run_id)


async def records(store: JournalStore, run_id: str) -> list[ToolEffectRecord]:
    """One record per dispatch attempt in intent order; an orphan's outcome fields are None."""
    intents: dict[str, dict[str, Any]] = {}
    outcomes: dict[str, dict[str, Any]] = {}
    for row in await store.load_effects(run_id):
        attempt = str(row.get("attempt_id", ""))
        if row.get("phase") == "outcome":
            outcomes.setdefault(attempt, row)  # the first outcome of an attempt is its outcome
            intents.setdefault(attempt, {})  # an outcome without intent still shows up, in place
        else:
            intents.setdefault(attempt, row)
    out: list[ToolEffectRecord] = []
    for attempt, intent in intents.items():
        merged = {k: intent[k] for k in INTENT_FIELDS if k in intent}
        outcome = outcomes.get(attempt)
        if outcome is not None:
            merged = {**{k: outcome[k] for k in INTENT_FIELDS if k in outcome}, **merged}
            merged.update({k: outcome.get(k) for k in OUTCOME_FIELDS})
            merged.update(
                {k: outcome[k] for k in ("workdir", "cwd", "work_mount") if outcome.get(k)}
            )
        out.append(ToolEffectRecord.model_validate(merged))
    return out


async def orphans(store: JournalStore, run_id: str) -> list[ToolEffectRecord]:
    """Attempts whose intent was written but whose outcome never was (the effect is unknown)."""
    return [r for r in await records(store, run_id) if r.outcome is None]
