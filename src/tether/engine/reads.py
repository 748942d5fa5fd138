"""Views of a stored run beyond its journal and cost: the agent tree and events, an agent's transcript, the
effect ledger, a diff of two runs, and the run's audit bundle. The `Engine` methods of those names delegate here.

Every view is folded from the store (`tether.journal.tree`, `tether.journal.diff`, `tether.tools.ledger`,
`tether.audit.bundle`), so it reads the same in any process long after the run ended.
"""

from __future__ import annotations

import os
from pathlib import Path

from tether.contracts.errors import ConfigError
from tether.contracts.events import AgentEvent, ToolEffectRecord
from tether.engine.checkpoint import AgentTranscript, checkpoint_key, read_transcript
from tether.engine.seam import EngineSeam
from tether.journal.diff import RunDiff, diff_runs
from tether.journal.matching import JournalIndex
from tether.journal.tree import TreeReport, fold_agent_events, fold_tree
from tether.tools.ledger import records


async def diff(engine: EngineSeam, run_a: str, run_b: str) -> RunDiff:
    return diff_runs(run_a, await engine.inspect(run_a), run_b, await engine.inspect(run_b))


async def agent_events(engine: EngineSeam, run_id: str) -> list[AgentEvent]:
    return fold_agent_events(await engine.inspect(run_id))


async def agent_tree(engine: EngineSeam, run_id: str) -> TreeReport:
    return fold_tree(await engine.inspect(run_id))


async def transcript(engine: EngineSeam, run_id: str, agent_id: int) -> AgentTranscript:
    """Agent `agent_id`'s conversation as its last checkpoint holds it."""
    entries = await engine.inspect(run_id)
    running = next((e for e in entries if e.kind == "agent" and e.ref is None and e.agent_id == agent_id), None)
    if running is None or running.seq is None:
        raise ConfigError(f"run {run_id!r} has no agent #{agent_id}; engine.agent_tree(run_id) lists its agents",
                          run_id=run_id, agent_id=agent_id)
    terminal = JournalIndex.build(entries).terminal_of.get(running.seq)
    ref = (terminal.checkpoint_ref if terminal is not None else None) or checkpoint_key(run_id, running.seq)
    expect = terminal.checkpoint_sha256 if terminal is not None else None  # the chain vouches for a settled one
    return await read_transcript(await engine.store(), agent_id, ref, expect)


async def effect_ledger(engine: EngineSeam, run_id: str) -> list[ToolEffectRecord]:
    await engine.inspect(run_id)
    return await records(await engine.store(), run_id)


async def export(
    engine: EngineSeam, run_id: str, path: str | os.PathLike[str], sign_key: str | os.PathLike[str] | None,
    allow_unchained: bool,
) -> Path:
    """Write `run_id`'s audit bundle to `path` (signed with the Ed25519 key at `sign_key`); docs/audit.md."""
    from tether.audit.bundle import build_bundle, write_bundle

    await engine.inspect(run_id)
    doc = await build_bundle(await engine.store(), run_id, engine.price_of, allow_unchained=allow_unchained)
    return write_bundle(doc, path, sign_key)
