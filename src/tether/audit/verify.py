"""Verifying a run's record: checksums, the hash chain, the head, and the cost fold against recorded totals.

One walk over a run's stored entry texts (`verify_texts`) serves both a live store (`verify_store`) and
an offline bundle (`tether.audit.bundle.verify_bundle`): it stops at the first bad entry and says which
seq and why (`checksum`, `chain`, `entry`, `unchained`, `head`, `cost`, `blob`, `meta`, `signature`, `bundle`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.contracts.entries import JournalEntry
from tether.contracts.errors import JournalCorruptError, TetherError
from tether.contracts.money import usd
from tether.contracts.protocols import JournalStore
from tether.journal.chain import JournalChainError, body_of, digest
from tether.journal.cost import CostReport, fold_cost
from tether.stores.codec import EntryDecoder, decode_batch, entry_json


class AuditError(TetherError):
    """A run's record does not verify: `seq` names the first bad entry (None: the record as a whole), `why`
    the check that failed."""

    code = "audit-failed"

    @property
    def seq(self) -> int | None:
        seq = self.data.get("seq")
        return seq if isinstance(seq, int) else None

    @property
    def why(self) -> str:
        return str(self.data.get("why", ""))


@dataclass(frozen=True)
class Head:
    """The end of a run's chain: its last seq and the link to it (what the next entry's `prev` would be)."""

    seq: int
    link: str

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "link": self.link}


@dataclass
class Verified:
    """What a record that verified holds: entries, agents, USD, and its head."""

    run_id: str
    entries: list[JournalEntry]
    head: Head
    cost: CostReport
    agents: int = 0
    unchained: int = 0
    """Entries before the chain begins (written before journals were chained), accepted with `allow_unchained`."""
    checks: list[str] = field(default_factory=list)
    blobs: int = 0
    """Checkpoint blobs checked against the digests the chain holds."""
    not_covered: list[str] = field(default_factory=list)
    """What the record holds that the chain does not vouch for (docs/audit.md, *What the chain covers*)."""
    no_payload: list[int] = field(default_factory=list)
    """Entries whose payload archive or redact removed: the chain vouches for their digest, not for a text."""

    def summary(self) -> str:
        tail = f"; the first {self.unchained} unchained" if self.unchained else ""
        loose = f"; not covered by the chain: {', '.join(self.not_covered)}" if self.not_covered else ""
        if self.no_payload:
            loose += (f"; {len(self.no_payload)} entries carry no payload (archived or redacted, their digests "
                      f"kept): seq {', '.join(map(str, self.no_payload))}")
        return (f"run {self.run_id!r} verifies: {len(self.entries)} entries, {self.agents} agents, "
                f"{self.blobs} blobs, {usd(self.cost.total_usd)} USD ({', '.join(self.checks)}); head seq "
                f"{self.head.seq} link {self.head.link[:16]}{tail}{loose}")


def fail(run_id: str, why: str, message: str, seq: int | None = None) -> AuditError:
    at = f"seq {seq}: " if seq is not None else ""
    return AuditError(f"audit of run {run_id!r} failed at {at}{message}", run_id=run_id, seq=seq, why=why)


def verify_texts(run_id: str, texts: Sequence[str | bytes], where: str, *, allow_unchained: bool = False) -> Verified:
    """Decode a run's stored entry texts in seq order, checking each checksum, seq and link of the chain."""
    fast = decode_batch(texts)  # every check in one pass; None sends it to the walk that names the bad entry
    if fast is not None and len(fast) == len(texts):
        return _checked(run_id, fast, allow_unchained)
    decoder = EntryDecoder(run_id)
    entries: list[JournalEntry] = []
    for seq, text in enumerate(texts, start=1):
        try:
            entries.append(decoder.at(text, seq, f"seq {seq} of run {run_id!r} in {where}"))
        except JournalChainError as exc:
            raise fail(run_id, "chain", exc.message, exc.data.get("seq", seq)) from None
        except JournalCorruptError as exc:
            why = "checksum" if exc.data.get("why") == "checksum" else "entry"  # typed by the codec
            raise fail(run_id, why, exc.message, seq) from None
    return _checked(run_id, entries, allow_unchained)


def verify_entries(run_id: str, entries: Sequence[JournalEntry], *, allow_unchained: bool = False) -> Verified:
    """`verify_texts` over entries a store loaded (its load already checked checksums and the chain)."""
    return verify_texts(run_id, [entry_json(e, e.seq or 0) for e in entries], "the store",
                        allow_unchained=allow_unchained)


def _checked(run_id: str, entries: list[JournalEntry], allow_unchained: bool) -> Verified:
    if not entries:
        raise fail(run_id, "entry", "the run has no journal entries")
    unchained = next((i for i, e in enumerate(entries) if e.prev is not None), len(entries))
    if unchained and not allow_unchained:
        raise fail(run_id, "unchained", f"the entry carries no hash-chain link, so nothing vouches for seqs "
                   f"1..{unchained}: they were written before journals were chained, or their links were "
                   f"stripped. Pass --allow-unchained to verify the chained part only.", 1)
    stray = next((e for e in entries[unchained:] if e.prev is None), None)
    if stray is not None:
        raise fail(run_id, "unchained", "the entry carries no hash-chain link although earlier entries of the run "
                   "do, so it was written by something other than tether's writers (a raw store.append, or an "
                   "edit) and nothing vouches for the link into it", stray.seq)
    _check_costs(run_id, entries)
    no_payload = _check_redactions(run_id, entries)
    cost = fold_cost(entries)
    agents = sum(1 for e in entries if e.kind == "agent" and e.ref is None)
    head = Head(entries[-1].seq or len(entries), digest(body_of(entries[-1])))
    verified = Verified(run_id, entries, head, cost, agents, unchained, ["checksums", "chain", "cost fold"])
    verified.no_payload = no_payload
    return verified


def _check_redactions(run_id: str, entries: list[JournalEntry]) -> list[int]:
    """The seqs whose payload was removed, each named by a later archive or redact decision that lists it."""
    gone = [e for e in entries if e.redacted is not None]
    for e in gone:
        at = e.redacted or 0
        decision = entries[at - 1] if 0 < at <= len(entries) else None
        listed = decision.value.get("seqs") if decision is not None and isinstance(decision.value, dict) else None
        if (decision is None or at <= (e.seq or 0) or decision.value.get("decision") not in ("archive", "redact")
                or not isinstance(listed, list) or e.seq not in listed):
            raise fail(run_id, "entry", f"its payload was removed, naming decision seq {at}, but no archive or "
                       f"redact decision there lists it: the payload was removed by something other than tether",
                       e.seq)
        if e.payload_sha256 is None:
            raise fail(run_id, "entry", "it is marked redacted but carries no payload digest", e.seq)
    return [e.seq or 0 for e in gone]


def _check_costs(run_id: str, entries: list[JournalEntry]) -> None:
    """Each terminal's `cost_usd` is the sum of its per-model `costs` (the figure the folds read)."""
    for e in entries:
        if e.cost_usd is None or not e.costs:
            continue
        tally = math.fsum(e.costs.values())
        if not math.isclose(e.cost_usd, tally, rel_tol=1e-9, abs_tol=1e-12):
            raise fail(run_id, "cost", f"its cost_usd {e.cost_usd:.10f} differs from the sum of its per-model "
                       f"costs {tally:.10f}; the cost fold would not match the entry's own total", e.seq)


def check_head(run_id: str, found: Head, expected: str) -> None:
    """Refuse a chain whose head is not the one recorded earlier (`expected`: a link, or `SEQ:LINK`)."""
    seq_text, _, link = expected.rpartition(":")
    if seq_text and seq_text.isdigit() and int(seq_text) != found.seq:
        raise fail(run_id, "head", f"the journal ends at seq {found.seq} where the recorded head is seq "
                   f"{seq_text}: entries were removed from its end or appended after the head was recorded",
                   found.seq)
    if not found.link.startswith(link.lower()) or len(link) < 16:
        raise fail(run_id, "head", f"its link {found.link[:16]}.. is not the recorded head {link[:16]}..: the "
                   f"newest entry was changed, or entries were removed from or added to the end", found.seq)


def check_cost(run_id: str, folded: CostReport, recorded: dict[str, Any]) -> None:
    """Refuse a record whose entries fold to other figures than the totals recorded beside them."""
    for name in ("total_usd", "spent_usd", "orphaned_usd"):
        got, want = getattr(folded, name), recorded.get(name)
        if not isinstance(want, int | float) or not math.isclose(got, float(want), rel_tol=1e-9, abs_tol=1e-12):
            raise fail(run_id, "cost", f"the entries fold to {name} {got:.10f} but the recorded totals say "
                       f"{want!r}: an entry or the recorded cost report was changed")
    if folded.model_dump(mode="json") != recorded:
        raise fail(run_id, "cost", "the entries fold to a cost report other than the recorded one (by model, "
                   "phase, role or usage): an entry or the recorded cost report was changed")


async def verify_store(
    store: JournalStore, run_id: str, *, head: str | None = None, allow_unchained: bool = False
) -> Verified:
    """Verify a live run's chain in place: the store's own load checks checksums and links as it reads."""
    try:
        entries = await store.load(run_id)
    except JournalChainError as exc:
        raise fail(run_id, "chain", exc.message, exc.data.get("seq")) from None
    except JournalCorruptError as exc:
        why = "checksum" if exc.data.get("why") == "checksum" else "entry"  # typed by the codec
        raise fail(run_id, why, exc.message, _seq_of(exc)) from None
    verified = verify_entries(run_id, entries, allow_unchained=allow_unchained)
    if head is not None:
        check_head(run_id, verified.head, head)
        verified.checks.append("head")
    await check_beyond_entries(store, verified)
    return verified


async def check_beyond_entries(store: JournalStore, verified: Verified) -> dict[str, bytes]:
    """Check a live run's meta and checkpoint blobs against the chain (`tether.audit.coverage`); its blobs."""
    from tether.audit.coverage import check_blobs, check_meta, referenced_blobs, unchained_parts

    run_id = verified.run_id
    meta = await store.get_meta(run_id)
    check_meta(run_id, None if meta is None else meta.model_dump(mode="json"), verified.entries, verified.cost)
    blobs = await referenced_blobs(store, run_id, verified.entries)
    verified.blobs, loose = check_blobs(run_id, verified.entries, blobs)
    verified.checks += ["blobs", "meta"]
    verified.not_covered = unchained_parts(loose, len(await store.load_effects(run_id)))
    return blobs


def _seq_of(exc: JournalCorruptError) -> int | None:
    """The seq a store's corruption error names (in its data, or its `where`: `seq N of run ...`)."""
    seq = exc.data.get("seq")
    if isinstance(seq, int):
        return seq
    where = str(exc.data.get("where", ""))
    for marker in ("(seq ", "seq "):
        at = where.find(marker)
        if at >= 0:
            digits = "".join(c for c in where[at + len(marker):].split(" ")[0] if c.isdigit())
            if digits:
                return int(digits)
    return None
