"""A session turn as its run sees it: what its genesis names, and the history built from its ancestors' journals.

A turn's history is, for each ancestor from the session's first turn down to its parent, the user's message
(from the run's args, checked against the sha256 its genesis commits, so retention can remove the text) and the
final answer (the value its last `settle` holds, when it settled
`ok`). Ancestors are settled runs, so a resume reads the same history a live turn read. An archived or redacted
ancestor keeps its place: what retention removed reads `[turn N was archived]` (or `redacted`), so the line stays
a conversation the model can follow (docs/sessions.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from tether.contracts.entries import JournalEntry
from tether.contracts.messages import Message
from tether.contracts.protocols import JournalStore
from tether.contracts.sessions import SessionNotFoundError, SessionStore, TurnOf
from tether.journal.keys import GENESIS_KEY, SETTLE_KEY
from tether.journal.retained import retention_mark


def turn_of(entries: Sequence[JournalEntry]) -> TurnOf | None:
    """The `session` its genesis names (None: the run is no session turn)."""
    genesis = next((e for e in entries[:2] if e.key == GENESIS_KEY and e.scope == ""), None)
    value = genesis.value if genesis is not None and isinstance(genesis.value, dict) else {}
    found = value.get("session")
    return cast(TurnOf, found) if isinstance(found, dict) else None


def answer_of(entries: Sequence[JournalEntry]) -> str | None:
    """The run's final answer as history shows it: its `ok` settle's value (a string as is, else JSON)."""
    settle = next((e for e in reversed(entries) if e.key == SETTLE_KEY and e.scope == ""), None)
    value: Any = settle.value if settle is not None else None
    if not isinstance(value, dict) or value.get("status") != "ok":
        return None
    answer = value.get("value")
    return answer if isinstance(answer, str) else json.dumps(answer, sort_keys=True)


async def history(store: JournalStore, turn: TurnOf) -> tuple[Message, ...]:
    """The messages of `turn`'s ancestors, oldest first: each one's user prompt, then its answer if it settled ok."""
    if turn["parent"] is None:
        return ()
    if not isinstance(store, SessionStore):
        raise SessionNotFoundError(f"{type(store).__name__} holds no sessions", session=turn["session"])
    records = await store.session_turns(turn["session"])
    parents = {t.run_id: t.parent for t in records}
    index = {t.run_id: t.index for t in records}
    line: list[str] = []
    at: str | None = turn["parent"]
    while at is not None:
        if at not in parents:
            raise SessionNotFoundError(
                f"turn run {at!r} of session {turn['session']!r} is not in this store (deleted?); the history of "
                f"turn {turn['turn']} cannot be rebuilt. Branch from a turn whose line is whole.",
                session=turn["session"], run_id=at)
        line.append(at)
        at = parents[at]
    messages: list[Message] = []
    for run_id in reversed(line):
        entries = await store.load(run_id)
        ancestor, answer = turn_of(entries), answer_of(entries)
        mark = retention_mark(entries)
        if ancestor is None or (answer is None and mark is None):
            continue  # a turn that did not settle ok (refused, failed) adds nothing to the conversation
        meta = await store.get_meta(run_id)
        said = user_message(meta.args) if meta is not None and meta.args is not None else None
        if said is not None and message_sha256(said) != ancestor["prompt_sha256"]:
            said = None  # its args were archived or redacted (or edited): the chained digest decides
        if mark is not None or said is None:  # the turn keeps its place; what retention removed says so
            how = "archived" if mark is not None and mark.value.get("decision") == "archive" else "redacted"
            gone = f"[turn {index[run_id]} was {how}]"
            messages += [Message.text("user", said or gone), Message.text("assistant", answer or gone)]
            continue
        messages += [Message.text("user", said), Message.text("assistant", answer or "")]
    return tuple(messages)


def user_message(args: Any) -> str | None:
    """A turn's user message from its run's args: the `prompt` text, else the args as JSON (None: no args)."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    text = args.get("prompt")
    return text if isinstance(text, str) else json.dumps(args, sort_keys=True, default=str)


def message_sha256(text: str) -> str:
    """What a turn's genesis commits of its user message (the text itself lives in the run's args)."""
    return hashlib.sha256(text.encode()).hexdigest()


def history_identity(prompt: str, messages: Sequence[Message]) -> str:
    """The prompt as an agent's identity hashes it when the agent starts from `messages` (none: the prompt)."""
    if not messages:
        return prompt
    digest = hashlib.sha256(json.dumps([m.model_dump(mode="json") for m in messages], sort_keys=True).encode())
    return f"{prompt}\n#history:{digest.hexdigest()}"


@dataclass(frozen=True, slots=True)
class TurnContext:
    """`ctx.session`: the session turn a run is, and the history its agents start from."""

    session_id: str
    turn: int
    parent: str | None
    workspace: str
    prompt_sha256: str
    store: JournalStore

    async def history(self) -> tuple[Message, ...]:
        """The earlier turns of this line as messages (pass them as `ctx.agent(..., history=...)`)."""
        return await history(self.store, TurnOf(session=self.session_id, turn=self.turn, parent=self.parent,
                                                workspace=self.workspace, prompt_sha256=self.prompt_sha256))


def turn_context(store: JournalStore, entries: Sequence[JournalEntry]) -> TurnContext | None:
    found = turn_of(entries)
    if found is None:
        return None
    return TurnContext(session_id=found["session"], turn=found["turn"], parent=found["parent"],
                       workspace=found["workspace"], prompt_sha256=found["prompt_sha256"],
                       store=store)
