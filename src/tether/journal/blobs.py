"""Where the blobs a journal references live: an agent's checkpoint head and the transcript chunks it lists.

The engine writes them (`tether.engine.checkpoint`); the audit bundle reads them back by these keys.
"""

from __future__ import annotations


def checkpoint_key(run_id: str, agent_seq: int) -> str:
    """Where an agent invocation's checkpoint head lives (its terminal's `checkpoint_ref` names it too)."""
    return f"{run_id}/checkpoints/{agent_seq}"


def chunk_key(key: str, index: int) -> str:
    """Where chunk `index` of the transcript of the checkpoint head at `key` lives."""
    return f"{key}/m/{index}"
