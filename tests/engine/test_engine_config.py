"""The engine's typed configuration: `tether.Limits` and `tether.Telemetry`, and the loose keywords of earlier
releases laid over them; the lean `Engine` that holds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tether
from tether.contracts.events import Event
from tether.engine import engine as engine_module
from tether.testing import Reply


class Collect:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def close_run(self, run_id: str) -> None:
        return None


def test_the_loose_keywords_and_the_typed_objects_build_the_same_configuration() -> None:
    loose = tether.Engine(store="memory://", concurrency=3, max_spawns=7, lease_ttl_s=9.0, dispatch_wait_s=2.0,
                          queues={"q": 2}, capture_content=True)
    typed = tether.Engine(store="memory://", limits=tether.Limits(concurrency=3, max_spawns=7, lease_ttl_s=9.0,
                                                                  dispatch_wait_s=2.0, queues={"q": 2}),
                          telemetry=tether.Telemetry(capture_content=True))
    assert loose.limits == typed.limits and loose.telemetry == typed.telemetry
    services = typed.run_services()
    assert (services.concurrency, services.max_spawns, services.lease_ttl_s, services.dispatch_wait_s) == (3, 7, 9.0,
                                                                                                          2.0)


def test_a_loose_keyword_is_laid_over_the_object_given() -> None:
    engine = tether.Engine(store="memory://", limits=tether.Limits(max_spawns=7, lease_ttl_s=9.0), lease_ttl_s=4.0)
    assert (engine.limits.max_spawns, engine.limits.lease_ttl_s) == (7, 4.0)
    assert tether.Engine(store="memory://").limits == tether.Limits()


@pytest.mark.parametrize(("options", "match"), [
    ({"concurrency": 0}, "concurrency must be at least 1"),
    ({"queues": {"q": 0}}, r"queues\['q'\] must be a positive int"),
    ({"dispatch_wait_s": 0}, "dispatch_wait_s must be > 0"),
])
def test_limits_are_checked_in_either_spelling(options: dict[str, Any], match: str) -> None:
    with pytest.raises(tether.ConfigError, match=match):
        tether.Engine(store="memory://", **options)
    with pytest.raises(tether.ConfigError, match=match):
        tether.Limits(**options)


def test_an_unknown_engine_keyword_is_a_type_error_naming_the_config_objects() -> None:
    with pytest.raises(TypeError, match=r"'max_spawn'.*tether\.Limits.*tether\.Telemetry"):
        tether.Engine(store="memory://", max_spawn=3)  # type: ignore[call-arg]


async def test_telemetry_sinks_and_event_log_receive_every_run_s_events(tmp_path: Path) -> None:
    sink = Collect()
    model = tether.models.fake("fake", script=[Reply(text="hi")], prices={"m": tether.Price(input=1.0, output=1.0)})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db",
                           telemetry=tether.Telemetry(sinks=[sink], event_log=tmp_path / "{run_id}.jsonl"))

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> Any:
        return await ctx.agent("hello")

    assert (await engine.run(one, run_id="r")).status == "ok"
    await engine.close()
    assert sink.events[0].type == "run:start" and sink.events[-1].type == "run:end"
    assert [e.type for e in tether.read_events(tmp_path / "r.jsonl")] == [e.type for e in sink.events]


def test_engine_py_holds_configuration_and_the_run_api_in_under_300_lines() -> None:
    """Forks, schedules, operator actions and views are services (engine/forks.py, ...); Engine only delegates."""
    assert len(Path(engine_module.__file__).read_text().splitlines()) < 300
