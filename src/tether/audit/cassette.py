"""Run cassettes: a recorded run turned into a hermetic regression test (`tether export-cassette`).

A run cassette is the run's journal (stored entry texts), meta, effect-ledger rows and checkpoint blobs,
with the calls it recorded and its outcome. `tether.testing.replay_cassette` installs it in a fresh SQLite store and
resumes the workflow replay-strict (`dry_run=True`) with the engine's adapters offline: a call the journal
does not hold fails the run (an extra call), a recorded call the replay never served fails the test
(unplayed), and the outcome must be the recorded one (status, value, USD).

The network is blocked where the engine reaches it, at its model adapters (`offline_adapters`): nothing
process-wide (no `socket` patch) changes, so other code in the process keeps its network.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.audit.bundle import referenced_blobs
from tether.contracts.entries import TWO_PHASE_KINDS, JournalEntry, RunMeta, entry_from_dict
from tether.contracts.errors import ConfigError, TetherError
from tether.contracts.messages import ChatRequest
from tether.contracts.money import usd
from tether.contracts.protocols import ChatModel, JournalStore
from tether.contracts.signal import Signal
from tether.contracts.stream import ChatEvent, ModelCaps
from tether.journal.chain import relinked
from tether.journal.cost import fold_cost
from tether.journal.matching import JournalIndex
from tether.stores.codec import entry_json

FORMAT = "tether-run-cassette"
VERSION = 1
CASSETTE_FILE = "cassette.json"


class CassetteReplayError(TetherError, AssertionError):
    """A run cassette did not replay as recorded: an extra or unplayed call, or another outcome."""

    code = "cassette-replay"


class NetworkBlockedError(TetherError, ConnectionError):
    """A replay tried to reach the network: the workflow made a live call the cassette does not cover."""

    code = "network-blocked"


@dataclass(frozen=True)
class Call:
    """A recorded call: the first entry of an agent, step or child invocation."""

    seq: int
    kind: str
    label: str | None
    scope: str
    key: str


def recorded_calls(entries: list[JournalEntry]) -> list[Call]:
    """The calls a journal holds: every agent, step and child invocation that reached a terminal."""
    index = JournalIndex.build(entries)
    return [Call(e.seq or 0, e.kind, e.label, e.scope, e.key) for e in entries
            if e.kind in TWO_PHASE_KINDS and e.ref is None and e.seq in index.terminal_of]


async def build_cassette(store: JournalStore, run_id: str, *, workflow: str | None = None,
                         app: str | None = None) -> dict[str, Any]:
    """The cassette of `run_id` as a JSON object (`workflow`/`app`: the MODULE:ATTR targets its test imports)."""
    entries = await store.load(run_id)
    meta = await store.get_meta(run_id)
    if not entries or meta is None:
        raise ConfigError(f"no run {run_id!r} in this store to export; tether runs lists them", run_id=run_id)
    settle = JournalIndex.build(entries).last_settle()
    if settle is None or not isinstance(settle.value, dict):
        raise ConfigError(f"run {run_id!r} has not settled; a cassette records a finished run", run_id=run_id)
    blobs = await referenced_blobs(store, run_id, entries)
    return {
        "format": FORMAT, "version": VERSION, "run_id": run_id, "workflow": workflow, "app": app,
        "args": meta.args, "meta": meta.model_dump(mode="json"),
        "outcome": {"status": settle.value.get("status"), "value": settle.value.get("value"),
                    "total_usd": fold_cost(entries).total_usd},
        "calls": [c.__dict__ for c in recorded_calls(entries)],
        "entries": [entry_json(e, e.seq or 0) for e in entries],
        "effects": await store.load_effects(run_id),
        "blobs": {k: base64.b64encode(v).decode() for k, v in blobs.items()},
    }


TEST_TEMPLATE = '''"""Regression test made by `tether export-cassette`: it replays the recorded run (the cassette
file beside this one) strictly with the engine's model adapters offline, and fails on any call the recording lacks
or any recorded call not replayed. Every value below is a Python literal (`repr`), never code."""

from pathlib import Path

from tether.testing import replay_cassette

CASSETTE = Path(__file__).with_name({file!r})
WORKFLOW = {workflow!r}
"""MODULE:WORKFLOW of the workflow the run ran (importable from where pytest runs)."""
APP = {app!r}
"""MODULE:ATTR of the tether.Engine it ran on (None: WORKFLOW's module's `engine`, else a default engine)."""


def test_run_{name}_replays_as_recorded(tmp_path: Path) -> None:
    replay_cassette(CASSETTE, workflow=WORKFLOW, app=APP, workdir=tmp_path)
'''


def write_cassette(doc: dict[str, Any], out_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write the cassette and its pytest file into `out_dir`; returns both paths."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    cassette = folder / CASSETTE_FILE
    cassette.write_text(json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    name = re.sub(r"[^0-9a-z_]", "_", str(doc["run_id"]).lower()).strip("_") or "run"  # an ASCII identifier
    test = folder / f"test_{name}.py"
    workflow, app = doc.get("workflow"), doc.get("app")
    test.write_text(TEST_TEMPLATE.format(file=CASSETTE_FILE, workflow=workflow if isinstance(workflow, str) else None,
                                         app=app if isinstance(app, str) else None, name=name), encoding="utf-8")
    return cassette, test


def read_cassette(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the run cassette {path} ({exc}); export it again with tether "
                          f"export-cassette", path=str(path)) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ConfigError(f"{path} is not a version-{VERSION} tether run cassette; export it again with tether "
                          f"export-cassette", path=str(path))
    return doc


_AGENT_SCOPE = re.compile(r"(?<![^/])agent:(\d+)")


def installed_entries(run_id: str, texts: list[str]) -> tuple[list[JournalEntry], dict[int, int]]:
    """The cassette's entries numbered 1.. again (entries edited out of it leave no gap), relinked.

    A ref to a removed entry, or a scope under a removed agent, drops the entry too. Returns the entries and
    the old-seq -> new-seq map.
    """
    renumber: dict[int, int] = {}
    out: list[JournalEntry] = []
    for text in texts:
        data = json.loads(text)
        data.pop("checksum", None)
        entry = entry_from_dict(data)
        old = entry.seq or 0
        scopes = [int(n) for n in _AGENT_SCOPE.findall(entry.scope)]
        if (entry.ref is not None and entry.ref not in renumber) or any(n not in renumber for n in scopes):
            continue
        renumber[old] = len(out) + 1
        scope = _AGENT_SCOPE.sub(lambda m: f"agent:{renumber[int(m.group(1))]}", entry.scope)
        ref = None if entry.ref is None else renumber[entry.ref]
        checkpoint = _moved_key(run_id, entry.checkpoint_ref, renumber)
        out.append(entry.replace(seq=renumber[old], ref=ref, scope=scope, checkpoint_ref=checkpoint, prev=None))
    return relinked(out), renumber


def _moved_key(run_id: str, key: str | None, renumber: dict[int, int]) -> str | None:
    prefix = f"{run_id}/checkpoints/"
    if key is None or not key.startswith(prefix):
        return key
    seq, sep, rest = key[len(prefix):].partition("/")
    if not seq.isdigit() or int(seq) not in renumber:
        return None
    return f"{prefix}{renumber[int(seq)]}{sep}{rest}"


async def install(doc: dict[str, Any], store: JournalStore) -> tuple[str, list[JournalEntry]]:
    """Write the cassette's run into `store` (a fresh one); returns the run id and the installed journal."""
    run_id = str(doc["run_id"])
    entries, renumber = installed_entries(run_id, list(doc["entries"]))
    await store.append_many(run_id, entries)
    await store.put_meta(RunMeta.model_validate(doc["meta"]))
    for key, data in dict(doc.get("blobs") or {}).items():
        moved = _moved_key(run_id, key, renumber)
        if moved is not None:
            await store.put_blob(moved, base64.b64decode(data))
    for row in doc.get("effects") or []:
        await store.append_effect(run_id, row)
    return run_id, entries


@dataclass
class OfflineModel:
    """An adapter's stand-in during a replay: its id, family and caps (prices), and a `stream` that never
    reaches the adapter's client but raises `NetworkBlockedError`."""

    adapter: ChatModel
    id: str = ""
    family: str = ""

    def __post_init__(self) -> None:
        self.id, self.family = self.adapter.id, self.adapter.family

    def caps(self, model: str) -> ModelCaps:
        return self.adapter.caps(model)

    async def stream(self, request: ChatRequest, signal: Signal | None = None) -> AsyncIterator[ChatEvent]:
        raise NetworkBlockedError(
            f"network blocked: the replay asked {self.adapter.id}:{request.model} for a live reply, so the "
            f"workflow made a call the cassette does not cover (an extra call)", adapter=self.adapter.id)
        yield  # an async generator, like every adapter's stream


@contextlib.contextmanager
def offline_adapters(engine: Any) -> Iterator[None]:
    """Swap `engine`'s adapters for `OfflineModel` stand-ins while inside (the replay owns the engine it
    resolved: it points it at the cassette's store and closes it); restored on the way out."""
    adapters: dict[str, ChatModel] = engine.adapters
    saved = dict(adapters)
    adapters.update({key: OfflineModel(model) for key, model in saved.items()})
    try:
        yield
    finally:
        adapters.clear()
        adapters.update(saved)


def check_replay(doc: dict[str, Any], outcome: Any, calls: list[Call]) -> None:
    run_id, recorded = doc["run_id"], doc.get("outcome") or {}
    if outcome.status != recorded.get("status"):
        why = f": {outcome.error}" if outcome.error is not None else ""
        raise CassetteReplayError(f"run {run_id!r} replayed {outcome.status}, recorded {recorded.get('status')}{why}",
                                  run_id=run_id)
    if outcome.replay.misses or outcome.replay.reruns:
        raise CassetteReplayError(f"run {run_id!r} made {outcome.replay.misses} call(s) the cassette lacks and reran "
                                  f"{outcome.replay.reruns}: the workflow no longer makes the recorded calls",
                                  run_id=run_id)
    if outcome.replay.hits < len(calls):
        raise CassetteReplayError(
            f"run {run_id!r} replayed {outcome.replay.hits} of its {len(calls)} recorded calls: the workflow no "
            f"longer makes {len(calls) - outcome.replay.hits} of them (unplayed)", run_id=run_id)
    from tether.journal.canonical import to_jsonable

    if to_jsonable(outcome.value) != recorded.get("value"):
        raise CassetteReplayError(f"run {run_id!r} replayed the value {outcome.value!r}, recorded "
                                  f"{recorded.get('value')!r}", run_id=run_id)
    if not math.isclose(outcome.cost.total_usd, float(recorded.get("total_usd") or 0.0), abs_tol=1e-12):
        raise CassetteReplayError(f"run {run_id!r} replayed at {usd(outcome.cost.total_usd)} USD, recorded "
                                  f"{recorded.get('total_usd')}", run_id=run_id)
