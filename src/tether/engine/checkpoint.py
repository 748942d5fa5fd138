"""Agent checkpoints: a small head blob plus the transcript in chunks (their keys: `tether.journal.blobs`).

A checkpoint is a small head blob (the loop's state without its messages, and the tally) plus the
transcript in chunks: each save writes only the messages added since the last one, so a turn's
checkpoint costs the same at turn 200 as at turn 2, and a resume reads the chunks back in order
(time linear in the transcript). A chunk is written before the head that names it; every chunk
carries its lineage, index and first message number, and a head whose chunks do not all line up
is unreadable (the agent starts over), so a crash between the writes leaves the previous head valid.

Chunks are hash-linked: each carries the sha256 of the chunk before it, and the head the sha256 of the last
one (`tip`), so a head stays small however long the transcript. An agent's terminal journals the sha256 of
the head it last wrote (`JournalEntry.checkpoint_sha256`): the journal's hash chain then covers a settled
agent's whole transcript (docs/audit.md), and a load refuses a chunk that is not the one its head names.
"""

from __future__ import annotations

import json
import operator
import uuid
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ValidationError

from tether.agents.state import LoopState
from tether.budget.tally import Tally
from tether.contracts.errors import JournalCorruptError
from tether.contracts.messages import Message
from tether.contracts.protocols import JournalStore
from tether.contracts.usage import ZERO_USAGE, Usage
from tether.journal.blobs import blob_digest as blob_digest
from tether.journal.blobs import checkpoint_key as checkpoint_key
from tether.journal.blobs import chunk_key as chunk_key
from tether.journal.blobs import chunk_link_error as chunk_link_error
from tether.journal.blobs import head_links as head_links
from tether.journal.blobs import is_redacted_blob, vouched_digest


class _Chunk(BaseModel):
    lineage: str
    index: int
    start: int
    messages: list[Message]
    prev: str | None = None
    """The sha256 of the chunk before it ("" for the first; None in chunks written before chunks were linked)."""


class _Head(BaseModel):
    layout: Literal[2] = 2
    lineage: str
    chunks: int
    loop: LoopState
    """The loop state with `messages` empty (they are in the chunks)."""
    tally: Tally
    tip: str | None = None
    """The sha256 of the last chunk ("" when there is none; None in heads written before chunks were linked)."""


@dataclass(slots=True)
class CheckpointChain:
    """What one invocation's checkpoints hold so far, so the next save writes only what is new."""

    key: str
    lineage: str = ""
    """Random per start of a transcript (minted at the first write), so chunks of another never pass."""
    chunks: int = 0
    saved: list[Message] | tuple[()] = ()
    """The messages written so far (a list from the first write on: none made per invocation before it)."""
    tip: str = ""
    """The sha256 of the last chunk written ("": none yet): the next chunk and the next head link to it."""
    head_sha256: str = ""
    """The sha256 of the head last written or read ("": none yet): what the invocation's terminal journals."""

    def writes(self, state: LoopState, tally: Tally) -> list[tuple[str, bytes]]:
        """The blobs to write, in order: a chunk of the new messages (if any), then the head."""
        messages, n = state.messages, len(self.saved)
        if not self.lineage:
            self.lineage = uuid.uuid4().hex
        if len(messages) < n or not all(map(operator.is_, messages, self.saved)):
            # The transcript was rewritten rather than extended: a new lineage, from its first message.
            self.lineage, self.chunks, self.saved, self.tip, n = uuid.uuid4().hex, 0, [], "", 0
        out: list[tuple[str, bytes]] = []
        if len(messages) > n:
            added = messages[n:]
            chunk = _Chunk(lineage=self.lineage, index=self.chunks, start=n, messages=added,
                           prev=self.tip).model_dump_json().encode()
            out.append((chunk_key(self.key, self.chunks), chunk))
            self.chunks += 1
            if isinstance(self.saved, list):
                self.saved.extend(added)
            else:
                self.saved = list(added)
            self.tip = blob_digest(chunk)
        head = _Head(lineage=self.lineage, chunks=self.chunks, loop=state.model_copy(update={"messages": []}),
                     tally=tally, tip=self.tip).model_dump_json().encode()
        out.append((self.key, head))
        self.head_sha256 = blob_digest(head)
        return out


async def read_checkpoint(store: JournalStore, key: str) -> tuple[LoopState, Tally, CheckpointChain] | None:
    """A checkpoint read back (head, then its chunks in order), or None when it is missing or does not
    hold together (an unreadable checkpoint is never trusted)."""
    try:
        return await _read(store, key, None)
    except _Unreadable:
        return None


class _Unreadable(Exception):
    """A checkpoint that does not hold together (why, for the error a vouched-for read raises)."""


class _Redacted(_Unreadable):
    """A checkpoint whose text archive or redact removed: its digests check, its messages are gone."""


async def _read(store: JournalStore, key: str, expect: str | None) -> tuple[LoopState, Tally, CheckpointChain] | None:
    data = await store.get_blob(key)
    if data is None:
        if expect:
            raise _Unreadable("its checkpoint head is missing")
        return None
    if expect == "":
        raise _Unreadable("a checkpoint head exists although its terminal journaled that it wrote none")
    if expect is not None and vouched_digest(data) != expect:
        raise _Unreadable(f"its checkpoint head's sha256 is {vouched_digest(data)[:16]}.., not the {expect[:16]}.. "
                          f"its terminal journaled")
    if is_redacted_blob(data):
        raise _Redacted("its checkpoint head was emptied by archive or redact")
    try:
        envelope = json.loads(data)
        if isinstance(envelope, dict) and envelope.get("layout") == 2:
            head = _Head.model_validate(envelope)
            raws = [await store.get_blob(chunk_key(key, i)) for i in range(head.chunks)]
            broken = chunk_link_error(head.tip, raws) if head.tip is not None else None
            if broken is not None:
                raise _Unreadable(broken)
            if any(raw is not None and is_redacted_blob(raw) for raw in raws):
                raise _Redacted("a chunk of its transcript was emptied by archive or redact")
            messages: list[Message] = []
            for i, raw in enumerate(raws):
                if raw is None:
                    raise _Unreadable(f"its chunk {i} is missing")
                chunk = _Chunk.model_validate_json(raw)
                if (chunk.lineage, chunk.index, chunk.start) != (head.lineage, i, len(messages)):
                    raise _Unreadable(f"its chunk {i} belongs to another transcript")
                messages.extend(chunk.messages)
            tip = blob_digest(raws[-1]) if raws and raws[-1] is not None else ""
            state = head.loop.model_copy(update={"messages": messages})
            if head.tip is None:  # unlinked chunks (an older head): the next save starts a linked lineage
                return state, head.tally, CheckpointChain(key, head_sha256=blob_digest(data))
            chain = CheckpointChain(key, head.lineage, head.chunks, list(messages), tip, blob_digest(data))
            return state, head.tally, chain
        # A whole-transcript checkpoint (written before chunks existed): the next save starts a lineage.
        state = LoopState.model_validate(envelope["loop"])
        return state, Tally.model_validate(envelope["tally"]), CheckpointChain(key, head_sha256=blob_digest(data))
    except (ValidationError, ValueError, KeyError, TypeError, RecursionError):
        raise _Unreadable("it is not a checkpoint tether wrote") from None


async def continued_state(store: JournalStore, keys: tuple[str, ...]) -> LoopState | None:
    """The conversation a ceiling-stopped invocation reached, for the invocation that continues it after a raise
    (docs/budgets.md, *Continuing after a raise*): the first readable checkpoint of `keys` (the stopped one's,
    then those it continued in turn), with the per-invocation tallies zeroed (what the earlier invocations
    paid is in their own terminals), or None (nothing checkpointed: the agent starts from its prompt)."""
    for key in keys:
        restored = await read_checkpoint(store, key)
        if restored is not None:
            state = restored[0]
            state.provider_calls, state.usage, state.usage_by_model = 0, ZERO_USAGE, {}
            return state
    return None


class AgentTranscript(BaseModel):
    """An agent invocation's conversation as its last checkpoint holds it (`engine.transcript(...)`).

    An agent that answered in its first turn never checkpointed: `checkpointed` is False and
    `messages` is empty (its journaled output is the whole story).
    """

    agent_id: int
    checkpoint_ref: str
    checkpointed: bool
    messages: list[Message] = []
    turns: int = 0
    usage: Usage = Usage()
    served_by: str | None = None
    redacted: bool = False
    """Archive or redact removed its text (`messages` empty); the digests its terminal journaled still check."""


async def read_transcript(store: JournalStore, agent_id: int, ref: str, expect: str | None = None) -> AgentTranscript:
    """Agent `agent_id`'s transcript under `ref`; `expect` is the head's sha256 its terminal journaled ("": it
    wrote none), and a checkpoint that is not that one is a `JournalCorruptError`, never a transcript."""
    try:
        restored = await _read(store, ref, expect)
    except _Redacted:
        return AgentTranscript(agent_id=agent_id, checkpoint_ref=ref, checkpointed=True, redacted=True)
    except _Unreadable as exc:
        if expect is None:
            restored = None
        else:
            raise JournalCorruptError(
                f"the transcript of agent #{agent_id} ({ref}) is not the one its terminal vouches for: {exc}; the "
                f"checkpoint blobs were edited after the agent settled", agent_id=agent_id, checkpoint_ref=ref,
            ) from None
    if restored is None:
        return AgentTranscript(agent_id=agent_id, checkpoint_ref=ref, checkpointed=False)
    state = restored[0]
    return AgentTranscript(agent_id=agent_id, checkpoint_ref=ref, checkpointed=True, messages=list(state.messages),
                           turns=state.turns, usage=state.usage, served_by=state.served_by)
