"""Checkpoints cost the same per turn however long the agent runs, and read back in linear time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.agents.state import LoopState
from tether.budget.tally import Tally
from tether.contracts.messages import Message
from tether.engine.checkpoint import CheckpointChain, chunk_key, read_checkpoint
from tether.stores import open_store
from tether.testing import Reply, ToolCall

TURNS = 60


class BlobLog:
    """A store that records every blob write and read (and otherwise delegates)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.writes: list[tuple[str, int]] = []
        self.reads: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def put_blob(self, key: str, data: bytes, lease: Any = None) -> None:
        self.writes.append((key, len(data)))
        await self._inner.put_blob(key, data, lease)

    async def get_blob(self, key: str) -> bytes | None:
        self.reads.append(key)
        return await self._inner.get_blob(key)


def long_agent_engine(store: Any, turns: int = TURNS) -> tuple[tether.Engine, Any]:
    def script(request: Any) -> Reply:
        done = sum(1 for m in request.messages if m.role == "tool")
        if done < turns - 1:
            return Reply(tool_calls=[ToolCall("note", {"i": done})], text="x" * 300, input_tokens=10, output_tokens=5)
        return Reply(text="done", input_tokens=10, output_tokens=5)

    @tether.tool
    def note(i: int) -> str:
        """Write a note."""
        return "y" * 300

    @tether.workflow(name="long")
    async def long(ctx: tether.Ctx) -> Any:
        return await ctx.agent("work", tools=[note], max_turns=turns + 1)

    model = tether.models.fake("fake", script=script)
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store), long


async def test_a_turns_checkpoint_writes_only_what_the_turn_added(tmp_path: Path) -> None:
    store = BlobLog(open_store(f"sqlite:///{tmp_path}/t.db"))
    engine, long = long_agent_engine(store)
    out = await engine.run(long, run_id="r")
    assert out.status == "ok" and out.value == "done"
    chunks = [size for key, size in store.writes if "/m/" in key]
    heads = [size for key, size in store.writes if "/m/" not in key]
    assert len(heads) >= TURNS  # at least one checkpoint per tool turn
    # the transcript grows ~700 bytes a turn; no write does: the last turn's match the first's
    assert max(chunks[-5:]) <= 2 * max(chunks[:5])
    assert max(heads[-5:]) <= max(heads[:5]) + 64
    assert sum(size for _, size in store.writes) < TURNS * 4 * 1024  # linear in turns, not quadratic
    await engine.close()


async def test_a_resumed_agent_reads_its_checkpoint_head_then_each_chunk_once(tmp_path: Path) -> None:
    store = BlobLog(open_store(f"sqlite:///{tmp_path}/t.db"))
    engine, long = long_agent_engine(store)
    await engine.run(long, run_id="r")
    key = next(k for k, _ in store.writes if "/m/" not in k)
    chunk_count = len({k for k, _ in store.writes if k.startswith(key + "/m/")})
    store.reads.clear()
    restored = await read_checkpoint(store, key)
    assert restored is not None
    state, _, chain = restored
    assert store.reads == [key, *[chunk_key(key, i) for i in range(chunk_count)]]  # linear: one read per chunk
    assert len(state.messages) == 1 + 2 * (TURNS - 1)  # the prompt, then an assistant + tool message per turn
    assert chain.chunks == chunk_count and chain.saved == state.messages
    await engine.close()


def state_with(messages: int) -> LoopState:
    state = LoopState.start("hello")
    for i in range(messages - 1):
        state.messages.append(Message.text("assistant", f"turn {i}"))
    state.turns = messages
    return state


async def test_a_crash_between_a_chunk_and_its_head_leaves_the_previous_checkpoint_readable(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/t.db")
    chain, state = CheckpointChain("r/checkpoints/1"), state_with(3)
    for key, data in chain.writes(state, Tally(through=1)):
        await store.put_blob(key, data)
    state.messages.append(Message.text("assistant", "the turn the crash cut"))
    state.turns += 1
    chunk, _head = chain.writes(state, Tally(through=2))
    await store.put_blob(*chunk)  # ... and the process dies before the head is written
    restored = await read_checkpoint(store, "r/checkpoints/1")
    assert restored is not None
    back, tally, _ = restored
    assert len(back.messages) == 3 and back.turns == 3 and tally.through == 1
    await store.close()


async def test_a_checkpoint_whose_chunks_do_not_line_up_is_never_trusted(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/t.db")
    key = "r/checkpoints/1"
    chain, state = CheckpointChain(key), state_with(2)
    for k, data in chain.writes(state, Tally()):
        await store.put_blob(k, data)
    state.messages.append(Message.text("assistant", "more"))
    for k, data in chain.writes(state, Tally()):
        await store.put_blob(k, data)
    assert await read_checkpoint(store, key) is not None
    other = CheckpointChain(key)  # a new lineage (an agent that started over) overwrites chunk 0 only
    await store.put_blob(*other.writes(state_with(2), Tally())[0])
    assert await read_checkpoint(store, key) is None  # the old head's chunk 0 is not its own: start over
    await store.put_blob(chunk_key(key, 0), b"not json")
    assert await read_checkpoint(store, key) is None
    await store.close()


async def test_a_rewritten_transcript_starts_a_new_lineage_from_its_first_message(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/t.db")
    key = "r/checkpoints/1"
    chain, state = CheckpointChain(key), state_with(4)
    for k, data in chain.writes(state, Tally()):
        await store.put_blob(k, data)
    first = chain.lineage
    state.messages[1] = Message.text("assistant", "replaced")
    writes = chain.writes(state, Tally())
    for k, data in writes:
        await store.put_blob(k, data)
    assert chain.lineage != first and json.loads(writes[0][1])["start"] == 0
    restored = await read_checkpoint(store, key)
    assert restored is not None and restored[0].messages[1].text_content == "replaced"
    await store.close()


async def test_a_whole_transcript_checkpoint_from_before_chunks_still_loads(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/t.db")
    state = state_with(3)
    envelope = {"loop": state.model_dump(mode="json"), "tally": Tally(through=2).model_dump(mode="json")}
    await store.put_blob("r/checkpoints/1", json.dumps(envelope).encode())
    restored = await read_checkpoint(store, "r/checkpoints/1")
    assert restored is not None
    back, tally, chain = restored
    assert back.messages == state.messages and tally.through == 2 and chain.chunks == 0
    await store.close()


async def test_engine_transcript_reads_the_chunked_checkpoint_back(tmp_path: Path) -> None:
    engine, long = long_agent_engine(f"sqlite:///{tmp_path}/t.db", turns=5)
    out = await engine.run(long, run_id="r")
    assert out.status == "ok"
    read = await engine.transcript("r", 1)
    assert read.checkpointed and read.turns >= 4
    roles = [m.role for m in read.messages]
    assert roles[0] == "user" and roles.count("tool") == 4  # every tool result the turns added, in order
    assert read.checkpoint_ref == "r/checkpoints/2"  # seq 1 is the genesis; the agent's entry is seq 2
    with pytest.raises(tether.ConfigError, match="no agent #9"):
        await engine.transcript("r", 9)
    with pytest.raises(tether.RunNotFoundError):
        await engine.transcript("nope", 1)
    await engine.close()
