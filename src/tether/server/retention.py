"""The retention side of the API: delete a run, sweep old runs, the store's figures and its compaction
(docs/retention.md). Each answers as the CLI command of the same name does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from tether.contracts.entries import MetaStatus
from tether.contracts.retention import CompactResult, StoreStats
from tether.engine import redaction, retention
from tether.engine.redaction import RetentionReport
from tether.engine.retention import DeleteReport, SweepReport
from tether.server.api import state_of
from tether.server.models import BODY, JsonInt
from tether.server.routing import ApiError, Call


class DeleteQuery(BaseModel):
    """Query of `DELETE /api/runs/{run_id}`."""

    force: bool = Field(default=False, description="Delete it even if running, queued or suspended.")
    with_forks: bool = Field(default=False, description="Delete the runs forked from it too.")


class SweepRequest(BaseModel):
    """`POST /api/sweep`: the settled runs last updated before `before` (ISO 8601; UTC unless it names a zone)."""

    model_config = BODY

    before: datetime
    statuses: list[MetaStatus] | None = Field(default=None, max_length=10)
    dry_run: bool = False


class StatsQuery(BaseModel):
    """Query of `GET /api/store/stats`."""

    largest: int = Field(default=5, ge=0, le=100)


async def delete_run(call: Call) -> DeleteReport:
    """`engine.delete`: 409 `run-active` (nothing deleted) for a running, queued or suspended run without `force`;
    a run this server drives is refused even with it (cancel it first)."""
    state, query = state_of(call), call.query
    assert isinstance(query, DeleteQuery)
    if state.driving(call.run_id) is not None:
        raise ApiError(409, "run-driven-here", f"run {call.run_id!r} is running in this server; cancel it (POST "
                       f"/api/runs/{{run_id}}/cancel) and delete it once it settles", run_id=call.run_id)
    return await state.engine.delete(call.run_id, force=query.force, with_forks=query.with_forks)


async def sweep(call: Call) -> SweepReport:
    body = call.body
    assert isinstance(body, SweepRequest)
    when = body.before if body.before.tzinfo is not None else body.before.replace(tzinfo=UTC)
    statuses = set(body.statuses) if body.statuses is not None else None
    return await retention.sweep(await state_of(call).engine.store(), before=when.timestamp(), statuses=statuses,
                                 dry_run=body.dry_run)


async def store_stats(call: Call) -> StoreStats:
    query = call.query
    assert isinstance(query, StatsQuery)
    return await retention.store_stats(await state_of(call).engine.store(), largest=query.largest)


async def compact(call: Call) -> CompactResult:
    return await retention.compact(await state_of(call).engine.store())


class ArchiveRequest(BaseModel):
    """`POST /api/runs/{run_id}/archive`: why (journaled with who and when)."""

    model_config = BODY

    why: str | None = Field(default=None, max_length=2000)


def _no_default(schema: dict[str, Any]) -> None:
    """A member one of which the body must carry (`oneOf` above): its schema names no default."""
    schema.pop("default", None)


class RedactRequest(BaseModel):
    """`POST /api/runs/{run_id}/redact`: one of `match` (every payload holding the text) or `seq` (one entry's)."""

    model_config = ConfigDict(**BODY, json_schema_extra={"oneOf": [{"required": ["match"]}, {"required": ["seq"]}]})

    match: Annotated[str | None, WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 10_000})] = Field(
        default=None, min_length=1, max_length=10_000, json_schema_extra=_no_default)
    seq: Annotated[JsonInt | None, WithJsonSchema({"type": "integer", "minimum": 1})] = Field(
        default=None, ge=1, json_schema_extra=_no_default)
    why: str | None = Field(default=None, max_length=2000)


def _not_driven(call: Call, what: str) -> None:
    if state_of(call).driving(call.run_id) is not None:
        raise ApiError(409, "run-driven-here", f"run {call.run_id!r} is running in this server; {what} it once it "
                       f"settles", run_id=call.run_id)


async def archive_run(call: Call) -> RetentionReport:
    """`tether.engine.redaction.archive`: 409 `run-active` for a running or queued run."""
    body = call.body
    assert isinstance(body, ArchiveRequest)
    _not_driven(call, "archive")
    return await redaction.archive(state_of(call).engine, call.run_id, why=body.why)


async def redact_run(call: Call) -> RetentionReport:
    """`tether.engine.redaction.redact`: 409 `run-retained` when the text is in chained members or in an entry
    written before payloads were sealed (nothing changed), 400 `config` without exactly one of match and seq."""
    body = call.body
    assert isinstance(body, RedactRequest)
    _not_driven(call, "redact")
    return await redaction.redact(state_of(call).engine, call.run_id, match=body.match, seq=body.seq, why=body.why)
