"""The effect ledger: intent before the effect, outcome after, paired by attempt; never the args."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

import pytest
import rfc8785

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import ExecRequest, ExecResult
from tether.tools.executors import InProcessExecutor, SubprocessExecutor
from tether.tools.ledger import EffectLedger, args_hash, idempotency_key, orphans, records

DISTINCTIVE = "zebra-quartz-4417"
ARGS: dict[str, Any] = {"value": {"needle": DISTINCTIVE, "n": [1, 2.5, None]}}


class MemoryEffects:
    """A store double: just the effect-ledger half of `JournalStore`."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.gate: asyncio.Event | None = None

    async def append_effect(self, run_id: str, row: Mapping[str, Any]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.rows.setdefault(run_id, []).append(json.loads(json.dumps(dict(row))))

    async def load_effects(self, run_id: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.rows.get(run_id, [])]


def exists(path: str) -> bool:
    return os.path.exists(path)


def request(**update: Any) -> ExecRequest:
    key = idempotency_key("run-1", 4, 0, "echo", ARGS)
    base = ExecRequest(
        tool="echo",
        target="toolbox:echo",
        args=ARGS,
        timeout_s=60,
        idempotency_key=key,
    )
    return base.model_copy(update=update)


def ledger(store: MemoryEffects, run_id: str = "run-1") -> EffectLedger:
    ids = iter(f"attempt-{i}" for i in range(100))
    return EffectLedger(store, run_id, clock=lambda: 1700000000.5, new_id=lambda: next(ids))  # type: ignore[arg-type]


def test_args_hash_is_sha256_of_the_canonical_args() -> None:
    expected = hashlib.sha256(rfc8785.dumps(ARGS)).hexdigest()
    assert args_hash(ARGS) == expected
    assert args_hash({"b": 1, "a": 2}) == args_hash({"a": 2, "b": 1})


def test_the_idempotency_key_is_stable_and_tells_calls_apart() -> None:
    key = idempotency_key("run-1", 4, 0, "echo", ARGS)
    assert key == idempotency_key("run-1", 4, 0, "echo", dict(ARGS))
    others = {
        idempotency_key("run-2", 4, 0, "echo", ARGS),
        idempotency_key("run-1", 5, 0, "echo", ARGS),
        idempotency_key("run-1", 4, 1, "echo", ARGS),
        idempotency_key("run-1", 4, 0, "cat", ARGS),
        idempotency_key("run-1", 4, 0, "echo", {"value": 1}),
    }
    assert key not in others and len(others) == 5


@pytest.mark.parametrize("executor_cls", [InProcessExecutor, SubprocessExecutor])
async def test_a_dispatch_writes_an_intent_then_an_outcome_without_the_args(
    executor_cls: type[InProcessExecutor],
) -> None:
    store = MemoryEffects()
    from toolbox import echo

    result = await ledger(store).dispatch(executor_cls(), request(), echo, span_id="span-7")
    assert (result.outcome, result.value) == ("ok", ARGS["value"])
    rows = store.rows["run-1"]
    assert [r["phase"] for r in rows] == ["intent", "outcome"]
    assert DISTINCTIVE not in json.dumps(rows), "a ledger row contains the arguments"
    intent, outcome = rows
    assert intent["attempt_id"] == outcome["attempt_id"] == "attempt-0"
    for row in rows:
        assert row["args_hash"] == hashlib.sha256(rfc8785.dumps(ARGS)).hexdigest()
        assert row["idempotency_key"] == request().idempotency_key
        assert (row["run_id"], row["span_id"], row["tool"]) == ("run-1", "span-7", "echo")
        assert row["executor"] == executor_cls.name
    assert intent["workdir"] and intent["workdir"] == outcome["workdir"] == result.workdir
    assert not exists(intent["workdir"])
    assert outcome["outcome"] == "ok" and outcome["duration_ms"] > 0
    [record] = await records(store, "run-1")  # type: ignore[arg-type]
    assert record.outcome == "ok" and record.started_at == 1700000000.5
    assert record.workdir == result.workdir and record.attempt_id == "attempt-0"


async def test_the_intent_row_is_written_before_the_effect_starts() -> None:
    store = MemoryEffects()
    effects: list[str] = []

    def tool(value: object) -> object:
        effects.append("ran")
        return value

    store.gate = asyncio.Event()
    task = asyncio.ensure_future(
        ledger(store).dispatch(InProcessExecutor(), request(), tool, span_id="s")
    )
    await asyncio.sleep(0.05)
    assert effects == [] and "run-1" not in store.rows
    store.gate.set()
    await task
    assert effects == ["ran"]
    assert [r["phase"] for r in store.rows["run-1"]] == ["intent", "outcome"]


async def test_records_pair_attempts_and_report_timeouts_with_their_signal() -> None:
    store = MemoryEffects()
    book = ledger(store)
    await book.dispatch(SubprocessExecutor(), request(), span_id="s1")
    timed_out = request(
        tool="spawn_grandchild_and_sleep",
        target="toolbox:spawn_grandchild_and_sleep",
        args={"pidfile": os.devnull},
        timeout_s=1.0,
    )
    await book.dispatch(SubprocessExecutor(), timed_out, span_id="s2")
    first, second = await book.records()
    assert (first.attempt_id, first.outcome, first.exit_code, first.signal) == (
        "attempt-0",
        "ok",
        0,
        None,
    )
    assert (second.attempt_id, second.outcome, second.exit_code, second.signal) == (
        "attempt-1",
        "timeout",
        None,
        "SIGKILL",
    )
    assert second.duration_ms is not None and second.duration_ms >= 900
    assert await book.orphans() == []


async def test_an_intent_without_an_outcome_is_an_orphan() -> None:
    store = MemoryEffects()
    book = ledger(store)
    await book.dispatch(InProcessExecutor(), request(), lambda value: value, span_id="s1")
    orphan_intent = {
        "phase": "intent",
        "attempt_id": "crashed-1",
        "idempotency_key": "k-crash",
        "run_id": "run-1",
        "span_id": "s2",
        "tool": "deploy",
        "args_hash": args_hash({}),
        "executor": "subprocess",
        "workdir": "/tmp/gone",
        "cwd": None,
        "work_mount": None,
        "started_at": 1.0,
    }
    await store.append_effect("run-1", orphan_intent)
    all_records = await records(store, "run-1")  # type: ignore[arg-type]
    assert [r.attempt_id for r in all_records] == ["attempt-0", "crashed-1"]
    [orphan] = await orphans(store, "run-1")  # type: ignore[arg-type]
    assert orphan.attempt_id == "crashed-1" and orphan.tool == "deploy"
    assert (orphan.outcome, orphan.exit_code, orphan.signal, orphan.duration_ms) == (
        None,
        None,
        None,
        None,
    )


async def test_the_outcome_row_is_written_even_when_the_caller_is_cancelled() -> None:
    writing, release = asyncio.Event(), asyncio.Event()

    class SlowOutcomeStore(MemoryEffects):
        async def append_effect(self, run_id: str, row: Mapping[str, Any]) -> None:
            if row["phase"] == "outcome":
                writing.set()
                await release.wait()
            await super().append_effect(run_id, row)

    store = SlowOutcomeStore()
    task = asyncio.ensure_future(
        ledger(store).dispatch(InProcessExecutor(), request(), lambda value: value, span_id="s")
    )
    await writing.wait()
    task.cancel()  # the effect happened; its outcome write is in flight
    await asyncio.sleep(0.01)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [r["phase"] for r in store.rows["run-1"]] == ["intent", "outcome"]


async def test_an_executor_failure_is_recorded_as_an_error_outcome() -> None:
    class Broken:
        name = "broken"

        async def run(self, request: ExecRequest, fn: Any = None) -> ExecResult:
            raise RuntimeError("engine fell over")

    store = MemoryEffects()
    with pytest.raises(RuntimeError):
        await ledger(store).dispatch(Broken(), request(), span_id="s")
    [record] = await records(store, "run-1")  # type: ignore[arg-type]
    assert (record.outcome, record.executor, record.workdir) == ("error", "broken", "")


async def test_a_dispatch_needs_an_idempotency_key() -> None:
    with pytest.raises(ConfigError, match="idempotency_key"):
        await ledger(MemoryEffects()).dispatch(
            InProcessExecutor(), request(idempotency_key=""), lambda value: value, span_id="s"
        )
