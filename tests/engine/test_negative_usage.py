"""Usage is never a credit: a negative count from any adapter is refused at the engine boundary (issue 34,
item 4: a reply reporting -10M output tokens once set spend to -150 USD and let thirty agents run on 0.05)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

import tether
from tether.contracts.messages import ChatRequest
from tether.contracts.signal import Signal
from tether.contracts.stream import ChatEvent, Finish, ModelCaps, TextDelta, UsageDelta
from tether.testing import Reply

PRICE = tether.Price(input=1.0, output=15.0)


class LyingAdapter:
    """A custom adapter that builds its usage around validation (`model_construct`), as a careless one might."""

    id = family = "liar"

    def __init__(self, where: str) -> None:
        self.where = where
        self.calls = 0

    def caps(self, model: str) -> ModelCaps:
        return ModelCaps(price=PRICE)

    async def stream(self, request: ChatRequest, signal: Signal | None = None) -> AsyncIterator[ChatEvent]:
        self.calls += 1
        credit = tether.Usage.model_construct(input_tokens=50, output_tokens=-10_000_000)
        yield UsageDelta(usage=tether.Usage(input_tokens=50))
        yield TextDelta(text="cheap")
        if self.where == "delta":
            yield UsageDelta.model_construct(type="usage", usage=credit)
        yield Finish.model_construct(type="finish", reason="stop",
                                     usage=credit if self.where == "finish" else tether.Usage(input_tokens=50))


@tether.workflow(name="thirty")
async def thirty(ctx: tether.Ctx) -> list[Any]:
    return [await ctx.agent(f"task {i}", on_error="none") for i in range(30)]


@pytest.mark.parametrize("where", ["delta", "finish"])
async def test_negative_usage_from_an_adapter_is_refused_and_never_credited(tmp_path: Path, where: str) -> None:
    model = LyingAdapter(where)
    engine = tether.Engine(models=[model], routing={"loop": "liar:m"}, store=f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(thirty, run_id="r", budget_usd=0.05)
    assert out.cost.total_usd >= 0 and all(v >= 0 for v in out.cost.by_model.values())
    assert out.cost.total_usd == pytest.approx(model.calls * 50 * 1.0 / 1e6)  # the input it billed, nothing less
    errors = [d.error for d in out.dropped]
    assert errors and all("negative usage (output_tokens=-10000000)" in str(e) for e in errors)
    await engine.close()


def test_usage_with_a_negative_count_cannot_be_built() -> None:
    with pytest.raises(pydantic.ValidationError):
        tether.Usage(output_tokens=-1)


async def test_an_edited_cassette_with_negative_usage_is_a_typed_error_not_a_credit(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    fake = tether.models.fake("fake", script=[Reply(text="hi", input_tokens=10, output_tokens=5)],
                              prices={"m": PRICE})
    recorder = tether.testing.cassette(fake, path, mode="record")
    engine = tether.Engine(models=[recorder], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/a.db")

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> Any:
        return await ctx.agent("hello")

    assert (await engine.run(one, run_id="r")).status == "ok"
    await engine.close()
    data = json.loads(path.read_text())
    edited = json.dumps(data).replace('"output_tokens": 5', '"output_tokens": -10000000')
    assert edited != json.dumps(data)
    path.write_text(edited)
    replay = tether.testing.cassette(tether.models.fake("fake", prices={"m": PRICE}), path, mode="replay")
    engine = tether.Engine(models=[replay], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/b.db")
    out = await engine.run(one, run_id="r")  # the request it recorded (a ceiling would change its output limit)
    assert out.status == "error" and isinstance(out.error, tether.ConfigError)
    assert "invalid stream event" in out.error.message and "re-record" in out.error.message
    assert out.cost.total_usd >= 0
    await engine.close()
