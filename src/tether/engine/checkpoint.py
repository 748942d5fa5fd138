"""Agent checkpoints: a small head blob plus the transcript in chunks (their keys: `tether.journal.blobs`).

A checkpoint is a small head blob (the loop's state without its messages, and the tally) plus the
transcript in chunks: each save writes only the messages added since the last one, so a turn's
checkpoint costs the same at turn 200 as at turn 2, and a resume reads the chunks back in order
(time linear in the transcript). A chunk is written before the head that names it; every chunk
carries its lineage, index and first message number, and a head whose chunks do not all line up
is unreadable (the agent starts over), so a crash between the writes leaves the previous head valid.
"""

from __future__ import annotations

import json
import operator
import uuid
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ValidationError

from tether.agents.state import LoopState
from tether.budget.tally import Tally
from tether.contracts.messages import Message
from tether.contracts.protocols import JournalStore
from tether.contracts.usage import Usage
from tether.journal.blobs import checkpoint_key as checkpoint_key
from tether.journal.blobs import chunk_key


class _Chunk(BaseModel):
    lineage: str
    index: int
    start: int
    messages: list[Message]


class _Head(BaseModel):
    layout: Literal[2] = 2
    lineage: str
    chunks: int
    loop: LoopState
    """The loop state with `messages` empty (they are in the chunks)."""
    tally: Tally


@dataclass(slots=True)
class CheckpointChain:
    """What one invocation's checkpoints hold so far, so the next save writes only what is new."""

    key: str
    lineage: str = ""
    """Random per start of a transcript (minted at the first write), so chunks of another never pass."""
    chunks: int = 0
    saved: list[Message] = field(default_factory=list)

    def writes(self, state: LoopState, tally: Tally) -> list[tuple[str, bytes]]:
        """The blobs to write, in order: a chunk of the new messages (if any), then the head."""
        messages, n = state.messages, len(self.saved)
        if not self.lineage:
            self.lineage = uuid.uuid4().hex
        if len(messages) < n or not all(map(operator.is_, messages, self.saved)):
            # The transcript was rewritten rather than extended: a new lineage, from its first message.
            self.lineage, self.chunks, self.saved, n = uuid.uuid4().hex, 0, [], 0
        out: list[tuple[str, bytes]] = []
        if len(messages) > n:
            added = messages[n:]
            chunk = _Chunk(lineage=self.lineage, index=self.chunks, start=n, messages=added)
            out.append((chunk_key(self.key, self.chunks), chunk.model_dump_json().encode()))
            self.chunks += 1
            self.saved.extend(added)
        head = _Head(lineage=self.lineage, chunks=self.chunks, loop=state.model_copy(update={"messages": []}),
                     tally=tally)
        out.append((self.key, head.model_dump_json().encode()))
        return out


async def read_checkpoint(store: JournalStore, key: str) -> tuple[LoopState, Tally, CheckpointChain] | None:
    """A checkpoint read back (head, then its chunks in order), or None when it is missing or does not
    hold together (an unreadable checkpoint is never trusted)."""
    data = await store.get_blob(key)
    if data is None:
        return None
    try:
        envelope = json.loads(data)
        if isinstance(envelope, dict) and envelope.get("layout") == 2:
            head = _Head.model_validate(envelope)
            messages: list[Message] = []
            for i in range(head.chunks):
                raw = await store.get_blob(chunk_key(key, i))
                if raw is None:
                    return None
                chunk = _Chunk.model_validate_json(raw)
                if (chunk.lineage, chunk.index, chunk.start) != (head.lineage, i, len(messages)):
                    return None
                messages.extend(chunk.messages)
            state = head.loop.model_copy(update={"messages": messages})
            return state, head.tally, CheckpointChain(key, head.lineage, head.chunks, list(messages))
        # A whole-transcript checkpoint (written before chunks existed): the next save starts a lineage.
        state = LoopState.model_validate(envelope["loop"])
        return state, Tally.model_validate(envelope["tally"]), CheckpointChain(key)
    except (ValidationError, ValueError, KeyError, TypeError):
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


async def read_transcript(store: JournalStore, agent_id: int, ref: str) -> AgentTranscript:
    restored = await read_checkpoint(store, ref)
    if restored is None:
        return AgentTranscript(agent_id=agent_id, checkpoint_ref=ref, checkpointed=False)
    state = restored[0]
    return AgentTranscript(agent_id=agent_id, checkpoint_ref=ref, checkpointed=True, messages=list(state.messages),
                           turns=state.turns, usage=state.usage, served_by=state.served_by)
