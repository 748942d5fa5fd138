"""The journal entry envelope and run metadata, as every store persists them."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal, NotRequired

import msgspec
from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, TypeAdapter, with_config
from pydantic_core import CoreSchema, core_schema, to_json
from typing_extensions import TypedDict  # pydantic reads a TypedDict's members from this one before 3.12

from tether.contracts.usage import Usage

HASH_VERSION = 1
"""The identity scheme entries are written with; `SUPPORTED_HASH_VERSIONS` may be read."""
SUPPORTED_HASH_VERSIONS = frozenset({1})

EntryKind = Literal[
    "agent", "step", "child", "rand", "decision", "external", "approval", "resolution", "abandon",
    "tree",
]
TWO_PHASE_KINDS = frozenset({"agent", "step", "child"})
EntryStatus = Literal[
    "running", "ok", "error", "limit", "cancelled", "exhausted", "suspended", "skipped",
]
RunStatus = Literal["running", "ok", "error", "cancelled", "exhausted", "suspended"]
MetaStatus = Literal["queued", "running", "ok", "error", "cancelled", "exhausted", "suspended", "dead"]
"""A run's status as listed: a run outcome's status, `queued` (waiting in the run queue for a worker), or
`dead` (dead-lettered: settled `error` after its workers kept dying, and never claimed again; docs/workers.md)."""
SETTLED_STATUSES = frozenset({"ok", "error", "cancelled", "exhausted", "suspended"})
_NOT_STORED = "~unknown members~"
"""`unknown`'s name to the decoder, which no stored member bears (one named `unknown` stays an unknown one)."""


class JournalEntry(msgspec.Struct, kw_only=True, gc=False, forbid_unknown_fields=True):
    """One journal record, as every store persists it (the JSON form is `to_json_dict()`).

    A plain record: the engine builds a few per call and keeps every one of a run in memory, so it holds
    its values and nothing else (a `msgspec.Struct` the cycle collector does not track: it never refers
    to itself). `tether.stores.codec` writes and reads it at the store boundary; members a newer version
    wrote that this one does not know are kept in `unknown` and written back as they were. `seq` is
    assigned once, when the entry is numbered.
    """

    seq: int | None = None
    ref: int | None = None
    scope: str = ""
    key: str = ""
    ordinal: int = 0
    kind: EntryKind
    status: EntryStatus | None = None
    label: str | None = None
    value: Any = None
    error: dict[str, Any] | None = None
    usage: Usage | None = None
    usage_by_model: dict[str, Usage] | None = None
    served_by: str | None = None
    provider_calls: int | None = None
    checkpoint_ref: str | None = None
    checkpoint_sha256: str | None = None
    """An agent terminal's: the sha256 (hex) of the checkpoint head `checkpoint_ref` names as the invocation last
    wrote it ("" when it wrote none; the head lists its chunks' digests), so the chain covers the transcript."""
    tool_budget: dict[str, Any] | None = None
    memoized: bool | None = None
    cost_usd: float | None = None
    phase: str | None = None
    agent_id: int | None = None
    parent_agent_id: int | None = None
    agent_type: str | None = None
    role: str | None = None
    hash_version: int = HASH_VERSION
    span_id: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    # -- what an agent's terminal and its turn draws carry for the cost folds (`journal.cost`) --------------
    costs: dict[str, float] | None = None
    """USD per model: a terminal's priced tally, a turn draw's."""
    orphaned: dict[str, float] | None = None
    """A terminal's calls a crash cut off, at their worst case, per model."""
    orphaned_usd: float | None = None
    cut: list[int] | None = None
    """The numbers of the dispatches `orphaned` charges."""
    unpriced: dict[str, Usage] | None = None
    """A terminal's usage of models without a price row."""
    from_call: int | None = None
    """A turn draw settles the invocation's dispatches `from_call` .. `through`."""
    through: int | None = None
    input_overhead: dict[str, int] | None = None
    """The input tokens per model the run has learned models bill beyond its estimates (a draw's)."""
    prev: str | None = None
    """The hash chain (`tether.journal.chain`): the sha256 of the previous entry's stored bytes without its
    checksum member (64 zeros at seq 1). None in journals written before entries were chained."""
    payload_sha256: str | None = None
    """The sha256 (hex) of the entry's payload (`PAYLOAD` members, `payload_bytes`): when set, the chain hashes the
    entry with this digest in place of its payload (`chain_form`), so removing the payload leaves the link whole."""
    redacted: int | None = None
    """The seq of the decision that removed this entry's payload (archive or redact); None while it holds it."""
    unknown: dict[str, Any] | None = msgspec.field(default=None, name=_NOT_STORED)
    """Members this version does not know (a newer one wrote them), written back untouched."""

    def to_json_dict(self) -> dict[str, Any]:
        """The entry as JSON data, unset members left out (what a store holds, minus the checksum)."""
        return _entry_json_dict(self)

    @classmethod
    def from_json_dict(cls, data: Any) -> JournalEntry:
        """An entry from JSON data (a dict), by the stored entry's one set of rules (`entry_from_dict`)."""
        return entry_from_dict(data)

    def replace(self, **changes: Any) -> JournalEntry:
        """A copy with `changes` applied; the entry itself is never changed."""
        return msgspec.structs.replace(self, **changes)

    # -- pydantic's spellings, kept for code written when entries were pydantic models: each delegates to
    # -- the one codec above (they validate and dump exactly as the stores do).

    def model_dump(
        self, *, mode: Literal["json", "python"] = "python", include: set[str] | None = None,
        exclude: set[str] | None = None, exclude_none: bool = False,
    ) -> dict[str, Any]:
        """The entry's members as a dict (`mode="json"`: JSON values), unknown members included."""
        data: dict[str, Any] = STORED.dump_python(_members(self), mode=mode, include=include, exclude=exclude,
                                                  exclude_none=exclude_none)
        data.update({k: v for k, v in (self.unknown or {}).items()
                     if (include is None or k in include) and not (exclude and k in exclude)})
        return data

    def model_dump_json(self, *, exclude_none: bool = True) -> str:
        """The entry as compact JSON, unset members left out (the bytes a store writes, minus the checksum)."""
        return entry_bytes(self).decode() if exclude_none else STORED.dump_json(_members(self)).decode()

    def model_copy(self, *, update: dict[str, Any] | None = None) -> JournalEntry:
        """A copy with `update` applied (`msgspec.structs.replace`)."""
        return msgspec.structs.replace(self, **(update or {}))

    @classmethod
    def model_validate(cls, data: Any) -> JournalEntry:
        """`from_json_dict` (an entry is returned as it is)."""
        return data if isinstance(data, JournalEntry) else entry_from_dict(data)

    @classmethod
    def model_validate_json(cls, text: str | bytes) -> JournalEntry:
        """An entry from its JSON text (the stores decode through `tether.stores.codec`, which checks more)."""
        return entry_from_dict(json.loads(text))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """An entry inside a pydantic model (a server page): validated as `model_validate` is, dumped and
        described as the stored shape (every declared member, `unknown` left out)."""
        stored = handler.generate_schema(StoredEntry)
        from_data = core_schema.no_info_after_validator_function(_built, stored)
        return core_schema.json_or_python_schema(
            json_schema=from_data,
            python_schema=core_schema.union_schema([core_schema.is_instance_schema(cls), from_data]),
            serialization=core_schema.plain_serializer_function_ser_schema(_members, return_schema=stored),
        )


def _stored_shape() -> Any:
    """`JournalEntry`'s members as a closed `TypedDict` (the same types and required members): what pydantic
    validates a stored entry's JSON against and writes it from."""
    members = {f.name: f.type if f.required else NotRequired[f.type]
               for f in msgspec.structs.fields(JournalEntry) if f.name != "unknown"}
    shape = TypedDict("JournalEntry", members)  # type: ignore[misc]  # built from the struct's fields
    return with_config(ConfigDict(extra="forbid"))(shape)


FIELDS: frozenset[str] = frozenset(JournalEntry.__struct_fields__) - {"unknown"}
StoredEntry: Any = _stored_shape()
STORED: TypeAdapter[dict[str, Any]] = TypeAdapter(StoredEntry)
"""The one adapter that validates a stored entry's members and writes them (`entry_bytes`)."""
_WRITE = STORED.serializer.to_json
"""`STORED.dump_json` without its Python wrapper (the same bytes; it runs for every entry a run appends)."""


def _members(entry: JournalEntry) -> dict[str, Any]:
    """The entry's declared members (not `unknown`) as a dict, in declaration order."""
    data = msgspec.structs.asdict(entry)
    del data["unknown"]
    return data


def _built(members: dict[str, Any]) -> JournalEntry:
    return JournalEntry(**members)


def member_types(tp: type, data: Any) -> Any:
    """msgspec's hook for the one member type it does not build itself: `Usage`, a pydantic model."""
    if tp is Usage:
        return Usage.model_validate(data)  # a ValidationError is a ValueError: msgspec reports it as invalid
    raise NotImplementedError(f"no decoder for {tp!r}")


ENTRY = msgspec.json.Decoder(JournalEntry, dec_hook=member_types)
"""The one validator of a stored entry: msgspec's, over the struct's own types (`entry_from_dict` applies the
same rules to data a JSON parser already read)."""


def entry_from_dict(data: Any) -> JournalEntry:
    """Validate JSON data (a dict) as an entry, by `ENTRY`'s rules; members this version does not know go to
    `unknown`. A value of the wrong shape raises `msgspec.ValidationError` (a `ValueError`)."""
    if isinstance(data, dict):
        unknown = {k: v for k, v in data.items() if k not in FIELDS}
        if unknown:
            data = {k: v for k, v in data.items() if k in FIELDS}
    else:
        unknown = {}
    entry = msgspec.convert(data, JournalEntry, dec_hook=member_types)
    if unknown:
        entry.unknown = unknown
    return entry


PAYLOAD = ("value", "error")
"""The members that may hold a run's texts (outputs, tool arguments and results, error messages): an entry with a
`payload_sha256` commits them by digest, so archive and redact can remove them (docs/audit.md)."""
DIGEST_MEMBER = b',"payload_sha256":"'
"""Where a sealed entry's chain form ends in its stored bytes: this member, 64 hex digits and a quote."""


def payload_bytes(entry: JournalEntry) -> bytes | None:
    """The canonical bytes of the entry's payload (`{"value":...,"error":...}`, unset members left out), or None
    when it has none: what `payload_sha256` digests."""
    if entry.value is None and entry.error is None:
        return None
    payload = {"value": entry.value} if entry.error is None else {"value": entry.value, "error": entry.error}
    return to_json(payload, exclude_none=True)


_DIGEST_AT = len(DIGEST_MEMBER)
_PLACEHOLDER = b"0" * 64


def entry_parts(entry: JournalEntry, seq: int | None = None, payload: bytes | None = None) -> tuple[bytes, bytes]:
    """(the bytes the chain hashes, the entry's bytes): the same for an unsealed entry; for a sealed one (its
    `payload_sha256` set) the chain form is the entry without its payload and its redaction mark, ending with the
    digest, and the stored bytes are that form followed by the payload (or `"redacted"`). `payload`: the entry's
    `payload_bytes`, when the caller has them."""
    if entry.payload_sha256 is None:
        body = entry_bytes(entry, seq)
        return body, body
    if not entry.unknown:
        body = _WRITE(_payload_last(_numbered(entry, seq), entry.payload_sha256), exclude_none=True)
        at = body.find(DIGEST_MEMBER) + _DIGEST_AT
        if body[at:at + 64] == entry.payload_sha256.encode():  # (else a nested member of that name came first)
            return body[:at + 65] + b"}", body
    skeleton = entry_bytes(msgspec.structs.replace(entry, value=None, error=None, payload_sha256=None,
                                                   redacted=None), seq)
    chain = b"".join((skeleton[:-1], DIGEST_MEMBER, entry.payload_sha256.encode(), b'"}'))
    if entry.redacted is not None:
        return chain, chain[:-1] + b',"redacted":' + str(entry.redacted).encode() + b"}"
    payload = payload_bytes(entry) if payload is None else payload
    return chain, chain[:-1] + b"," + payload[1:] if payload is not None else chain


def sealed_parts(entry: JournalEntry, seq: int | None = None) -> tuple[bytes, bytes] | None:
    """Seal a fresh entry in place (set its `payload_sha256`) and return `entry_parts`, with one serialization: the
    digest is taken over the payload bytes the entry is written with. None when there is nothing to seal this way
    (no payload, already sealed, members this version does not know)."""
    if entry.payload_sha256 is not None or entry.unknown or (entry.value is None and entry.error is None):
        return None
    body = _WRITE(_payload_last(_numbered(entry, seq), "0" * 64), exclude_none=True)
    at = body.find(DIGEST_MEMBER) + _DIGEST_AT
    end = at + 64
    if body[at:end] != _PLACEHOLDER:
        return None
    digest = hashlib.sha256(b"{" + body[end + 2:]).hexdigest()
    entry.payload_sha256 = digest
    body = body[:at] + digest.encode() + body[end:]
    return body[:end + 1] + b"}", body


def _payload_last(members: dict[str, Any], digest: str) -> dict[str, Any]:
    """`members` reordered for a sealed entry: the digest, then the payload and the redaction mark, last (the
    serializer writes a dict's members in its order)."""
    later = {"payload_sha256": digest, "value": members.pop("value"), "error": members.pop("error"),
             "redacted": members.pop("redacted")}
    del members["payload_sha256"]
    members.update(later)
    return members


def _numbered(entry: JournalEntry, seq: int | None) -> dict[str, Any]:
    """The entry's members to serialize: floats as floats, `seq` numbering the bytes."""
    members = _members(entry)
    for name in _FLOATS:
        if type(members[name]) is int:
            members[name] = float(members[name])
    if seq is not None:
        members["seq"] = seq
    return members


def entry_bytes(entry: JournalEntry, seq: int | None = None) -> bytes:
    """The entry as compact JSON: its set members in declaration order, then the unknown ones as they were (a
    sealed entry's payload after them: `entry_parts`).

    `seq` numbers the bytes without numbering the entry. The entry itself is never changed: members typed
    float that hold an int (a clock or a tally may hand one) are written as the floats a store reads back,
    so the same entry dumps to the same bytes however it was built."""
    if entry.payload_sha256 is not None:
        return entry_parts(entry, seq)[1]
    body = _WRITE(_numbered(entry, seq), exclude_none=True)
    if not entry.unknown:
        return body
    tail = to_json(entry.unknown)  # `{...}`: its members follow the declared ones
    return body[:-1] + b"," + tail[1:] if len(tail) > 2 else body


_FLOATS = ("cost_usd", "started_at", "ended_at")
"""The scalar members typed float that a caller may hand an int."""


def _entry_json_dict(entry: JournalEntry) -> dict[str, Any]:
    data: dict[str, Any] = STORED.dump_python(_members(entry), mode="json", exclude_none=True)
    if entry.unknown:
        data.update(entry.unknown)
    return data


class RunMeta(BaseModel):
    """What a store keeps about a run beside its journal (for listings and the CLI)."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    workflow: str
    status: MetaStatus = "running"
    args_hash: str | None = None
    args: Any = None
    budget_usd: float | None = None
    created_at: float
    updated_at: float
    parent_run_id: str | None = None
    segments: int = 1


class LeaseOwner(BaseModel):
    """Who drives a segment: a process on a host (so a dead owner on this host is provable)."""

    model_config = ConfigDict(frozen=True)

    owner_id: str
    host: str
    pid: int
    started_at: float
    """Process start time (boot-relative clock ticks on Linux) to defeat pid reuse."""
    pid_namespace: str | None = None
    """The kernel boot and pid namespace `pid` is numbered in (`<boot id>/pid:[<inode>]` on Linux): only a
    judge in the same one may call the owner dead by its pid. None when unknown (and in leases written
    before it was recorded): such an owner's lease is honoured until it expires."""


class Lease(BaseModel):
    """The right to append to one run; `epoch` grows on every acquire and survives delete."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    owner: LeaseOwner
    epoch: int
    expires_at: float
    ttl_s: float = Field(default=60.0)
