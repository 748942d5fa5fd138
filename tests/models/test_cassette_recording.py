"""Cassettes: record through a real adapter once, replay with zero transport requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import pytest
from wirekit import asker, run

from tether.contracts import (
    ChatModel,
    Finish,
    Signal,
    StreamError,
    TetherError,
    TextDelta,
    ToolCallEnd,
    Usage,
    UsageDelta,
)
from tether.models.anthropic_messages import AnthropicModel
from tether.models.fake import FakeModel, Reply
from tether.testing.cassette import (
    CassetteMissError,
    CassetteModel,
    CassetteUnusedError,
    cassette,
    redact,
    request_key,
)

MODEL = "claude-sonnet-4-6"
SECRET = "sk-ant-test-SECRET123"


def adapter(wire: Any) -> AnthropicModel:
    client = anthropic.AsyncAnthropic(api_key=SECRET, http_client=wire.http_client(), max_retries=0)
    return AnthropicModel(client=client)


ask = asker(MODEL, max_output_tokens=64)


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def test_recorded_events_replay_exactly_with_zero_requests(kit: Any, tmp_path: Path) -> None:
    path = tmp_path / "cassettes" / "weather.json"
    live = kit.wire(kit.sse("anthropic", "tool_use.sse"), kit.sse("anthropic", "text.sse"))
    recorder = cassette(adapter(live), path, mode="record")
    first = await run(recorder, ask("weather?"))
    second = await run(recorder, ask("thanks"))
    assert len(live.requests) == 2 and recorder.recorded == 2

    idle = kit.wire()  # any request would fail the test: nothing is queued
    player = cassette(adapter(idle), path)
    assert await run(player, ask("weather?")) == first
    assert await run(player, ask("thanks")) == second
    assert idle.requests == []
    assert player.replayed == 2 and player.unused() == []
    assert any(isinstance(e, ToolCallEnd) for e in first)  # validated back into typed events


async def test_a_consumer_that_stops_at_the_terminal_still_records(tmp_path: Path) -> None:
    path = tmp_path / "stop.json"
    recorder = cassette(FakeModel("fake", [Reply(text="x")]), path, mode="record")
    stream = recorder.stream(ask())
    async for event in stream:
        if event.type == "finish":
            break  # as the engine does: it never asks for more after the terminal
    await stream.aclose()  # type: ignore[attr-defined]
    assert recorder.recorded == 1
    assert len(json.loads(path.read_text())["exchanges"]) == 1


async def test_the_cassette_file_holds_no_api_key(kit: Any, tmp_path: Path) -> None:
    path = tmp_path / "secret.json"
    wire = kit.wire(kit.sse("anthropic", "text.sse"), kit.error("anthropic", "error_401.json", 401))
    recorder = cassette(adapter(wire), path, mode="record")
    await run(recorder, ask(f"my key is {SECRET}, keep it"))
    await run(recorder, ask("again"))
    assert SECRET in str(wire.requests[0].headers.raw)  # the key did go over the wire
    text = path.read_text()
    assert "SECRET123" not in text and "sk-ant" not in text
    lowered = text.lower()
    assert '"x-api-key":' not in lowered and '"authorization":' not in lowered
    assert "bearer" not in lowered
    assert "[redacted]" in text
    assert files_in(tmp_path) == ["secret.json"]  # no temp file left behind


async def test_a_replay_miss_is_a_typed_error_that_says_how_to_fix_it(tmp_path: Path) -> None:
    player = cassette(FakeModel("fake"), tmp_path / "empty.json")
    with pytest.raises(CassetteMissError) as caught:
        await run(player, ask())
    assert isinstance(caught.value, TetherError)
    assert caught.value.code == "cassette-miss"
    assert "mode='record'" in str(caught.value)


async def test_auto_mode_replays_hits_and_records_misses(kit: Any, tmp_path: Path) -> None:
    path = tmp_path / "auto.json"
    await run(
        cassette(adapter(kit.wire(kit.sse("anthropic", "text.sse"))), path, "record"), ask("a")
    )
    wire = kit.wire(kit.sse("anthropic", "refusal.sse"))
    auto = cassette(adapter(wire), path, mode="auto")
    hit = await run(auto, ask("a"))
    miss = await run(auto, ask("b"))
    assert len(wire.requests) == 1  # only the miss went live
    assert hit[-1].reason == "stop" and miss[-1].reason == "refusal"
    assert len(json.loads(path.read_text())["exchanges"]) == 2


async def test_unused_exchanges_are_listed_and_asserted(tmp_path: Path) -> None:
    path = tmp_path / "unused.json"
    fake = FakeModel("fake", [Reply(text="one"), Reply(text="two")])
    recorder = cassette(fake, path, mode="record")
    await run(recorder, ask("one"))
    await run(recorder, ask("two"))
    player = cassette(FakeModel("fake"), path)
    await run(player, ask("one"))
    assert [e.key for e in player.unused()] == [request_key(ask("two"))]
    with pytest.raises(CassetteUnusedError, match="1 unused exchange") as caught:
        player.assert_all_used()
    assert caught.value.data["keys"] == [request_key(ask("two"))]
    await run(player, ask("two"))
    player.assert_all_used()


async def test_the_key_ignores_telemetry_but_not_content(tmp_path: Path) -> None:
    assert request_key(ask(metadata={"trace": "1"})) == request_key(ask(metadata={"trace": "2"}))
    assert request_key(ask("x")) != request_key(ask("y"))
    assert request_key(ask()) != request_key(ask(tool_choice="none"))
    assert request_key(ask()) == request_key(ask(tool_choice="auto"))  # defaults add nothing


async def test_repeated_requests_replay_in_recorded_order(tmp_path: Path) -> None:
    path = tmp_path / "repeat.json"
    fake = FakeModel("fake", [Reply(error="rate-limit", retry_after_ms=5), Reply(text="ok")])
    recorder = cassette(fake, path, mode="record")
    await run(recorder, ask())
    await run(recorder, ask())
    player = cassette(FakeModel("fake"), path)
    first, second = await run(player, ask()), await run(player, ask())
    assert isinstance(first[-1], StreamError) and first[-1].retry_after_ms == 5
    assert isinstance(second[-1], Finish) and TextDelta(text="ok") in second


async def test_the_wrapper_keeps_id_family_and_caps(tmp_path: Path) -> None:
    inner = FakeModel("fake", family="fam", context_window=1234)
    wrapped = cassette(inner, tmp_path / "c.json", mode="auto")
    assert isinstance(wrapped, CassetteModel) and isinstance(wrapped, ChatModel)
    assert (wrapped.id, wrapped.family) == ("fake", "fam")
    assert wrapped.caps("m") == inner.caps("m")


async def test_record_mode_starts_over(tmp_path: Path) -> None:
    path = tmp_path / "over.json"
    await run(cassette(FakeModel("fake", [Reply(text="a")]), path, "record"), ask("a"))
    await run(cassette(FakeModel("fake", [Reply(text="b")]), path, "record"), ask("b"))
    keys = [e["key"] for e in json.loads(path.read_text())["exchanges"]]
    assert keys == [request_key(ask("b"))]


async def test_a_cancelled_replay_ends_with_a_cancelled_finish(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    await run(cassette(FakeModel("fake", [Reply(text="hello", chunks=3)]), path, "record"), ask())
    signal = Signal()
    events: list[Any] = []
    async for event in cassette(FakeModel("fake"), path).stream(ask(), signal):
        events.append(event)
        if isinstance(event, UsageDelta):
            signal.abort("budget")
    assert isinstance(events[0], UsageDelta) and len(events) == 2
    assert events[-1] == Finish(
        reason="cancelled", usage=events[0].usage.model_copy(update={"approximate": True})
    )


def test_redaction_covers_credential_fields_and_key_shaped_strings() -> None:
    data = {
        "Authorization": "Bearer abc",
        "headers": {"x-api-key": "anything", "api_key": "k"},
        "text": "use sk-proj-abcdef123456 or sk-ant-api03-XYZxyz_123",
        "n": 3,
    }
    assert redact(data) == {
        "Authorization": "[redacted]",
        "headers": {"x-api-key": "[redacted]", "api_key": "[redacted]"},
        "text": "use [redacted] or [redacted]",
        "n": 3,
    }


def test_a_bad_mode_or_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(TetherError, match="cassette mode"):
        cassette(FakeModel(), tmp_path / "x.json", mode="live")  # type: ignore[arg-type]
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(TetherError, match="not a tether cassette"):
        cassette(FakeModel(), bad)


async def test_usage_survives_the_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    reply = Reply(text="x", input_tokens=10, output_tokens=2, cache_read_tokens=4)
    recorded = await run(cassette(FakeModel("fake", [reply]), path, "record"), ask())
    replayed = await run(cassette(FakeModel("fake"), path), ask())
    assert replayed == recorded
    assert replayed[-1].usage == Usage(input_tokens=10, output_tokens=2, cache_read_tokens=4)
