"""The JSONL event log: a line per event, flushed as it goes, read back into the typed models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from obskit import engine_for, study

import tether
from tether.events import AgentEnd, RunEnd


async def test_the_event_log_of_a_run_reads_back_equal_to_the_live_events(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    engine, _ = engine_for(tmp_path, event_log=log)
    handle = engine.start(study, run_id="r", budget_usd=1.0)
    live = [event async for event in handle.events]
    await handle
    await engine.close()
    assert tether.read_events(log) == live
    lines = log.read_text().splitlines()
    assert len(lines) == len(live) and all(json.loads(line)["run_id"] == "r" for line in lines)


async def test_every_event_is_on_disk_as_soon_as_it_is_emitted(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    engine, _ = engine_for(tmp_path, event_log=log)
    handle = engine.start(study, run_id="r")
    on_disk: list[int] = []
    handle.on("*", lambda e: on_disk.append(len(log.read_text().splitlines())))
    live = [event async for event in handle.events]
    await handle
    await engine.close()
    assert on_disk == [e.seq for e in live], "each line is flushed before the next event"


async def test_replayed_events_are_marked_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    engine, model = engine_for(tmp_path, event_log=log)
    await engine.run(study, run_id="r")
    calls = model.calls
    resumed = await engine.resume("r", study)
    await engine.close()
    assert resumed.replay.hits == 2 and model.calls == calls
    events = tether.read_events(log)
    starts = [i for i, e in enumerate(events) if e.type == "run:start"]
    assert len(starts) == 2
    second = events[starts[1]:]
    ends = [e for e in second if isinstance(e, AgentEnd)]
    assert len(ends) == 2 and all(e.replayed for e in ends)
    assert not any(e.replayed for e in events[: starts[1]])
    assert isinstance(second[-1], RunEnd) and second[-1].hits == 2


async def test_a_run_option_writes_a_log_per_run(tmp_path: Path) -> None:
    engine, _ = engine_for(tmp_path)
    await engine.run(study, run_id="a", event_log=tmp_path / "logs" / "{run_id}.jsonl")
    await engine.run(study, run_id="b", event_log=tmp_path / "logs" / "{run_id}.jsonl")
    await engine.close()
    for run_id in ("a", "b"):
        events = tether.read_events(tmp_path / "logs" / f"{run_id}.jsonl")
        assert {e.run_id for e in events} == {run_id} and events[-1].type == "run:end"


def test_a_torn_last_line_is_ignored_and_a_damaged_one_is_a_typed_error(tmp_path: Path) -> None:
    good = '{"type": "warning", "run_id": "r", "seq": 1, "ts": 1.0, "message": "hi"}\n'
    torn = tmp_path / "torn.jsonl"
    torn.write_text(good + '{"type": "warn')
    assert [e.type for e in tether.read_events(torn)] == ["warning"]
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(good + "not json\n" + good)
    with pytest.raises(tether.EventLogError, match="line 2"):
        tether.read_events(damaged)


def test_fields_and_types_a_newer_tether_added_are_dropped_on_read(tmp_path: Path) -> None:
    log = tmp_path / "new.jsonl"
    log.write_text(
        '{"type": "warning", "run_id": "r", "seq": 1, "ts": 1.0, "message": "hi", "severity": 3}\n'
        '{"type": "quantum:leap", "run_id": "r", "seq": 2, "ts": 2.0}\n'
    )
    [event] = tether.read_events(log)
    assert event.type == "warning" and event.seq == 1


STEP_FLOW = '''
import tether

@tether.workflow(name="steps")
async def steps(ctx):
    async with ctx.phase("only"):
        return await ctx.step("add", lambda: 1 + 1)
'''


def test_the_cli_writes_the_event_log_with_events(tmp_path: Path) -> None:
    (tmp_path / "stepflow.py").write_text(STEP_FLOW)
    log = tmp_path / "cli.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path("src").resolve()), os.environ.get("PYTHONPATH", "")])}
    store = f"sqlite:///{tmp_path}/t.db"
    run = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "run", "stepflow:steps", "--run-id", "c", "--store", store,
         "--events", str(log), "--progress"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "run c: steps" in run.stdout and "run c: ok" in run.stdout  # --progress off a TTY: plain lines
    events = tether.read_events(log)
    assert [e.type for e in events] == ["run:start", "phase:start", "phase:end", "run:end"]
    quiet = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "resume", "c", "--workflow", "stepflow:steps", "--store", store,
         "--events", str(log)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert quiet.returncode == 0, quiet.stderr
    assert "run c: steps" not in quiet.stdout, "no live view off a TTY unless asked"
    assert [e.type for e in tether.read_events(log)].count("run:start") == 2


async def test_a_run_with_a_sink_and_one_without_emit_the_same_events(tmp_path: Path) -> None:
    """With no sink or callback the stream keeps the hot events' values and builds no model; what a subscriber
    then reads is what a run with a sink hands it, field for field (only the clock differs)."""

    class Recorder:
        def __init__(self) -> None:
            self.events: list[tether.events.Event] = []

        def emit(self, event: tether.events.Event) -> None:
            self.events.append(event)

        def close_run(self, run_id: str) -> None:
            pass

    recorder = Recorder()
    runs: list[list[tether.events.Event]] = []
    for name, sinks in (("watched", [recorder]), ("quiet", [])):
        (tmp_path / name).mkdir()
        engine, _ = engine_for(tmp_path / name, sinks=sinks)
        handle = engine.start(study, run_id="r", budget_usd=1.0)
        await handle
        runs.append([event async for event in handle.events])
        await engine.close()
    watched, quiet = runs
    assert recorder.events == watched
    assert [e.type for e in quiet] == [e.type for e in watched]
    assert {"agent:start", "model:start", "agent:stream", "model:end", "budget:draw", "agent:end"} <= {
        e.type for e in quiet}
    for q, w in zip(quiet, watched, strict=True):
        assert type(q) is type(w)
        assert q.model_dump(exclude={"ts"}) == w.model_dump(exclude={"ts"})
