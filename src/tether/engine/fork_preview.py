"""Fork previews: what a fork would reuse, invalidate (and why) and pay for, found by running nothing.

The new code runs against the fork's journal in a scratch store that lives for the preview only, with
every model answered by a placeholder (a recorded request, no network) and every host step that would
run live stopping the body. Reused, invalidated and new calls are read off the segment afterwards;
each new call is forecast from the source run's recorded usage (`tether.journal.forecast`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.agents.structured import asks_for_output
from tether.contracts.entries import TWO_PHASE_KINDS, JournalEntry, Lease, RunMeta
from tether.contracts.errors import TetherError
from tether.contracts.messages import ChatRequest
from tether.contracts.protocols import ChatModel, JournalStore
from tether.contracts.signal import Signal
from tether.contracts.stream import ChatEvent, ModelCaps
from tether.engine.events import EventStream
from tether.engine.fork import ForkPlan
from tether.engine.frame import CURRENT_FRAME
from tether.engine.handle import RunHandle
from tether.engine.outcome import RunOutcome, error_dict
from tether.engine.runner import drive
from tether.engine.segment import Segment
from tether.engine.services import RunServices
from tether.journal.cost import SpendFold, fold_spend
from tether.journal.disposition import disposition
from tether.journal.forecast import Forecast, Sample, forecast_call, samples_of, total
from tether.journal.matching import JournalIndex
from tether.routing import Router

Reason = Literal["prompt", "args", "model", "tools", "position", "rerun", "not-reached"]
"""Why a copied call is not reused: its prompt (or output schema) changed, a step's deps or a child's args,
its model, its tools, its place in the tree (its parent re-ran), its journaled end is one that runs again
(cancelled, a transport error), or the new code never reached it."""


class ReusedCall(BaseModel):
    """A journaled call the fork replays: the source's seq, what it was, what the source paid for it."""

    model_config = ConfigDict(frozen=True)

    seq: int
    kind: str
    label: str | None = None
    scope: str = ""
    usd: float = 0.0


class InvalidatedCall(ReusedCall):
    """A journaled call the fork does not reuse, and why."""

    reason: Reason
    detail: str = ""


class NewCall(BaseModel):
    """An agent call that would go live in the fork, with its forecast."""

    model_config = ConfigDict(frozen=True)

    label: str | None = None
    scope: str = ""
    model: str = ""
    agent_type: str | None = None
    forecast: Forecast = Field(default_factory=Forecast)


class ForkPreview(BaseModel):
    """What a fork would do, found without running or writing anything (`engine.fork(..., preview=True)`)."""

    model_config = ConfigDict(frozen=True)

    source_run_id: str
    run_id: str
    workflow: str
    at: int | None = None
    models: dict[str, str] = Field(default_factory=dict)
    reused: list[ReusedCall] = Field(default_factory=list)
    invalidated: list[InvalidatedCall] = Field(default_factory=list)
    new_calls: list[NewCall] = Field(default_factory=list)
    forecast: Forecast = Field(default_factory=Forecast)
    """The sum of the new calls' forecasts: what the fork would spend."""
    reused_usd: float = 0.0
    """What the source paid for the copied agent calls the new code replays: the fork's `CostReport.reused_usd`
    (a copy whose journaled end runs again, `rerun`, counts in it as it does in the fork's report)."""
    ceiling_usd: float | None = None
    """The USD ceiling the fork would run under (its new spend only)."""
    fits: bool | None = None
    """Whether the forecast's maximum fits under that ceiling (None: no ceiling)."""
    status: str = "ok"
    """How the preview's run of the new code ended (`suspended`: it would wait for an external value)."""
    stopped: str | None = None
    """Why the preview could not see the whole run (a host step it would have to run); calls after it are unknown."""
    pending: list[str] = Field(default_factory=list)


class ScratchStore:
    """A journal store for one preview: it holds what the preview writes and reads blobs through to the real
    store (agent checkpoints), which it never writes. Forgotten when the preview returns."""

    def __init__(self, base: JournalStore) -> None:
        self._base = base
        self._entries: dict[str, list[JournalEntry]] = {}
        self._meta: dict[str, RunMeta] = {}
        self._blobs: dict[str, bytes] = {}
        self._effects: dict[str, list[dict[str, Any]]] = {}

    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int:
        return (await self.append_many(run_id, [entry], lease))[0]

    async def append_many(self, run_id: str, entries: list[JournalEntry], lease: Lease | None = None) -> list[int]:
        log = self._entries.setdefault(run_id, [])
        seqs = []
        for e in entries:
            log.append(e.replace(seq=len(log) + 1))
            seqs.append(len(log))
        return seqs

    async def load(self, run_id: str) -> list[JournalEntry]:
        return [e.replace() for e in self._entries.get(run_id, [])]

    async def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        self._meta[meta.run_id] = meta.model_copy(deep=True)

    async def get_meta(self, run_id: str) -> RunMeta | None:
        return self._meta.get(run_id)

    async def list_runs(self, *, limit: int = 100) -> list[RunMeta]:
        return list(self._meta.values())[:limit]

    async def delete(self, run_id: str) -> None:
        self._entries.pop(run_id, None)

    async def put_blob(self, key: str, data: bytes, lease: Lease | None = None) -> None:
        self._blobs[key] = bytes(data)

    async def get_blob(self, key: str) -> bytes | None:
        return self._blobs[key] if key in self._blobs else await self._base.get_blob(key)

    async def append_effect(self, run_id: str, row: Mapping[str, Any]) -> None:
        self._effects.setdefault(run_id, []).append(dict(row))

    async def load_effects(self, run_id: str) -> list[dict[str, Any]]:
        return list(self._effects.get(run_id, []))

    async def close(self) -> None:
        return None


class PlaceholderModel:
    """An adapter's stand-in for a preview: the adapter's own caps (prices, limits), a placeholder answer.

    The answer differs from anything journaled, so every call whose prompt is built from a new call's
    output misses too, as it would in the fork; a structured answer repeats the source's for that label.
    """

    def __init__(self, real: ChatModel, outputs: Mapping[str, Any], label_of: Callable[[], str | None]) -> None:
        from tether.models.fake import FakeModel, Reply  # the fake adapter, only when a preview runs

        self.id, self.family, self._real = real.id, real.family, real
        self._reply_cls, self._outputs, self._label_of, self._n = Reply, outputs, label_of, itertools.count(1)
        self._fake = FakeModel(real.id, self._reply, family=real.family)

    def _reply(self, request: ChatRequest) -> Any:
        label = self._label_of()
        if asks_for_output(request) and label is not None and label in self._outputs:
            return self._reply_cls(output=self._outputs[label], output_tokens=1)
        return self._reply_cls(text=f"(preview placeholder #{next(self._n)})", output_tokens=1)

    def caps(self, model: str) -> ModelCaps:
        return self._real.caps(model)

    def stream(self, request: ChatRequest, signal: Signal | None = None) -> AsyncIterator[ChatEvent]:
        return self._fake.stream(request, signal)

    @property
    def requests(self) -> list[ChatRequest]:
        return self._fake.requests


async def _no_resolution(run_id: str, key: str, value: Any) -> bool:
    return False


async def preview_fork(
    store: JournalStore, services: RunServices, plan: ForkPlan, source: list[JournalEntry],
) -> ForkPreview:
    """Run the fork's code against its journal in a scratch store with placeholder models; nothing is written."""
    samples = samples_of(source)
    outputs = {e.label: e.value.get("output") for e in source if e.kind == "agent" and e.ref is not None
               and e.status == "ok" and e.label is not None and isinstance(e.value, dict)}
    events = EventStream(plan.run_id, [])
    handle = RunHandle(plan.run_id, events, _no_resolution)
    driven: list[Segment] = []  # the segment that drives the preview, to read what it matched afterwards
    handle.observe(driven.append)

    def label_of() -> str | None:
        """The label of the agent whose call is being answered (its frame's agent id, in the segment's index)."""
        frame, seg = CURRENT_FRAME.get(None), (driven[-1] if driven else None)
        if frame is None or seg is None or frame.agent_id is None:
            return None
        return next((e.label for e in seg.index.spend_entries
                     if e.kind == "agent" and e.ref is None and e.agent_id == frame.agent_id), None)

    adapters = {k: PlaceholderModel(m, outputs, label_of) for k, m in services.router.adapters.items()}
    scratch = ScratchStore(store)
    await scratch.append_many(plan.run_id, plan.entries)
    preview_services = dataclasses.replace(
        services, router=Router(adapters, dict(services.router.routes)), preview=True,
    )

    async def opened() -> JournalStore:
        return scratch

    outcome = await drive(preview_services, opened, handle, events, plan.workflow, plan.args, plan.opts)
    assert driven, "the preview's run never started a segment"
    return _report(plan, source, samples, driven[-1].index, outcome, services,
                   fold_spend(plan.entries))


def _report(
    plan: ForkPlan, source: list[JournalEntry], samples: list[Sample], index: JournalIndex, outcome: RunOutcome,
    services: RunServices, copied: SpendFold,
) -> ForkPreview:
    through = plan.lineage.reused_through
    left = {e.seq for e in index.unconsumed()}
    paid = {s.running.seq: s.spent_usd for s in copied.agents}  # the cost fold's figure per copied agent call
    fresh = [e for e in index.entries if (e.seq or 0) > through]
    new_agents = [e for e in fresh if e.kind == "agent" and e.ref is None]
    reused: list[ReusedCall] = []
    invalidated: list[InvalidatedCall] = []
    stopped = _stopped(outcome)
    for e in index.entries[1:]:
        seq = e.seq or 0
        if seq > through or e.kind not in TWO_PHASE_KINDS or e.ref is not None:
            continue
        terminal = index.terminal_of.get(seq)
        usd = paid.get(seq, 0.0) if e.kind == "agent" else float(terminal.cost_usd or 0.0) if terminal else 0.0
        call = {"seq": plan.lineage.seq_map.get(seq, seq), "kind": e.kind, "label": e.label,
                "scope": e.scope, "usd": round(usd, 10)}
        if seq in left:
            reason, detail = _why(e, new_agents, fresh, stopped)
            invalidated.append(InvalidatedCall(**call, reason=reason, detail=detail))
        elif disposition(e, terminal) != "replay":
            invalidated.append(InvalidatedCall(**call, reason="rerun", detail=f"its journaled end was "
                                               f"{terminal.status if terminal else 'missing'}"))
        else:
            reused.append(ReusedCall(**call))
    new_calls = []
    for e in new_agents:
        ended = index.terminal_of.get(e.seq or 0)
        model = (ended.served_by if ended is not None else None) or _requested(e)
        new_calls.append(NewCall(
            label=e.label, scope=e.scope, model=model, agent_type=e.agent_type,
            forecast=forecast_call(samples, label=e.label, agent_type=e.agent_type, model=model,
                                   price_of=services.price_of),
        ))
    forecast = total(c.forecast for c in new_calls)
    ceiling = plan.opts.ceiling
    return ForkPreview(
        source_run_id=plan.lineage.forked_from, run_id=plan.run_id, workflow=plan.workflow.name, at=plan.lineage.at,
        models=dict(plan.lineage.models), reused=reused, invalidated=invalidated, new_calls=new_calls,
        forecast=forecast, reused_usd=round(sum(paid.get(s, 0.0) for s in paid if s not in left), 10),
        ceiling_usd=ceiling, fits=None if ceiling is None else forecast.max_usd <= ceiling,
        status=outcome.status, stopped=stopped, pending=list(outcome.pending),
    )


def _stopped(outcome: RunOutcome) -> str | None:
    if outcome.status != "error":
        return None
    err = outcome.error
    if isinstance(err, TetherError):
        return err.message
    failed = error_dict(err)
    return str(failed.get("message")) if failed else "the new code raised"


def _requested(e: JournalEntry) -> str:
    model = e.value.get("model") if isinstance(e.value, dict) else None
    if isinstance(model, dict):
        model = model.get("model")
    return str(model or "")


def _why(
    e: JournalEntry, new_agents: list[JournalEntry], fresh: list[JournalEntry], stopped: str | None,
) -> tuple[Reason, str]:
    """Why a copied call was not matched, from the new call most like it (same kind and label)."""
    if e.kind == "step":
        return ("args", "its deps changed") if stopped and repr(e.label) in stopped else ("not-reached", "")
    if e.kind == "child":
        named = isinstance(e.value, dict) and any(
            f.kind == "child" and f.ref is None and isinstance(f.value, dict)
            and f.value.get("workflow") == e.value.get("workflow") for f in fresh
        )
        return ("args", "its args changed") if named else ("not-reached", "")
    like = [n for n in new_agents if n.label == e.label and n.agent_type == e.agent_type]
    if not like:
        return "not-reached", ""
    n = next((n for n in like if n.scope == e.scope), like[0])
    if n.key == e.key:
        return "position", f"its parent re-ran: scope {e.scope!r} is now {n.scope!r}"
    old = e.value if isinstance(e.value, dict) else {}
    new = n.value if isinstance(n.value, dict) else {}
    if old.get("model") != new.get("model"):
        return "model", f"{_requested(e)} -> {_requested(n)}"
    if (old.get("toolset") or {}).get("hash") != (new.get("toolset") or {}).get("hash"):
        return "tools", "its toolset changed"
    return "prompt", "its prompt (or output schema) changed"
