"""Dispatches validated tool calls through their executor and the effect ledger (in-process too)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tether.contracts.protocols import ExecRequest, Executor, JournalStore
from tether.tools.definition import ToolExecutionError
from tether.tools.executors import InProcessExecutor, get_executor
from tether.tools.ledger import EffectLedger, idempotency_key, orphans

if TYPE_CHECKING:
    from tether.tools.definition import Tool

__all__ = ["ToolCalls", "ToolExecutionError", "ToolRunner", "store_paths"]


class ToolRunner:
    """The engine's executors: the ones tools name (`executor="sandbox"`) are built once per engine."""

    def __init__(self) -> None:
        self._named: dict[str, Executor] = {}

    def executor(self, tool: Tool) -> Executor:
        if tool.executor in (None, "inprocess"):
            # The tool's value and exceptions reach the agent loop as they are (ModelRetry included).
            return InProcessExecutor(propagate=True)
        if not isinstance(tool.executor, str):
            return get_executor(tool.executor)
        named = self._named.get(tool.executor)
        if named is None:  # one per name and engine: the sandbox probes what its bwrap accepts once
            named = self._named[tool.executor] = get_executor(tool.executor)
        return named


class ToolCalls:
    """One segment's tool dispatch: every call writes one intent and one outcome ledger row.

    On resume, a call whose intent has no outcome (an orphan) is dispatched again with the same
    idempotency key when the tool is `idempotent`; otherwise it is not re-run and the model is told
    the earlier attempt's effect is unknown. Orphans are read once per segment: a segment's own
    dispatches can never orphan a call it makes again.
    """

    def __init__(self, runner: ToolRunner, store: JournalStore, run_id: str, clock: Callable[[], float]) -> None:
        self.runner = runner
        self.store = store
        self.run_id = run_id
        self.clock = clock
        self._orphans: dict[str, str] | None = None

    async def run(
        self, tool: Tool, args: dict[str, Any], *, agent_seq: int, ordinal: int, call_id: str, cwd: str | None = None,
    ) -> Any:
        key = idempotency_key(self.run_id, agent_seq, ordinal, tool.name, args)
        orphan = (await self._orphans_of()).get(key)
        if orphan is not None and not tool.idempotent:
            return (
                f"[effect unknown] an earlier attempt of {tool.name!r} (attempt {orphan}) was "
                "interrupted before it reported; it was not run again because the tool is not idempotent. "
                "Check its effect before retrying."
            )
        request = ExecRequest(
            tool=tool.name, target=tool.target, args=args, timeout_s=tool.timeout_s, idempotency_key=key, cwd=cwd,
            env=tool.env_values(), read_paths=tool.read_paths, hide_paths=store_paths(self.store), limits=tool.limits,
        )
        ledger = EffectLedger(self.store, self.run_id, clock=self.clock)
        executor = self.runner.executor(tool)
        result = await ledger.dispatch(executor, request, tool, span_id=f"agent-{agent_seq}:{call_id}")
        if result.outcome == "ok":
            return result.value
        if result.outcome == "timeout":
            raise ToolExecutionError(result.error or f"tool {tool.name!r} timed out", outcome="timeout",
                                     timeout_s=tool.timeout_s, signal=result.signal)
        if result.limit is not None:  # `[max_...] tool ... hit its resource cap ...`: the cap first, typed
            raise ToolExecutionError(result.error or f"[{result.limit}] tool {tool.name!r} hit a resource cap",
                                     outcome=result.outcome, exit_code=result.exit_code, signal=result.signal,
                                     limit=result.limit)
        raise ToolExecutionError(
            f"tool {tool.name!r} ended {result.outcome}: {result.error or ''}".strip(),
            outcome=result.outcome, exit_code=result.exit_code, signal=result.signal, limit=result.limit,
        )

    async def _orphans_of(self) -> dict[str, str]:
        """idempotency key → attempt id of this run's orphaned dispatches, loaded once per segment."""
        if self._orphans is None:
            self._orphans = {r.idempotency_key: r.attempt_id for r in await orphans(self.store, self.run_id)}
        return self._orphans


def store_paths(store: JournalStore) -> tuple[str, ...]:
    """The files of a store a sandboxed tool must never see (none for memory and PostgreSQL)."""
    from tether.stores.jsonl import JsonlStore
    from tether.stores.sqlite import SqliteStore

    if isinstance(store, SqliteStore) and store.path != ":memory:":
        return tuple(store.path + suffix for suffix in ("", "-wal", "-shm", "-journal"))
    if isinstance(store, JsonlStore):
        return (str(store.dir),)
    return ()
