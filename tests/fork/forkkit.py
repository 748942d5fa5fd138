"""What the fork tests share: a ten-call chain workflow on the fake provider, and a digest of every table of a
store (to prove a preview writes nothing)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from urllib.parse import parse_qs, urlparse

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply

PRICES = {"m": tether.Price(input=1.0, output=2.0), "big": tether.Price(input=10.0, output=30.0)}


def answer(request: ChatRequest) -> Reply:
    """A deterministic answer of a fixed length per prompt (so a changed prompt changes what follows)."""
    prompt = request.messages[-1].text_content
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    return Reply(text=(digest * 4)[:200])


def fake_model() -> tether.models.FakeModel:
    return tether.models.fake("fake", script=answer, prices=PRICES)


def make_engine(url: str, fake: tether.models.FakeModel) -> tether.Engine:
    return tether.Engine(models=[fake], routing={"loop": "fake:m"}, store=url)


def chain_workflow(changed: int | None = None, *, independent: bool = False) -> Callable[..., object]:
    """Ten agent calls, each prompt built from the previous answer; `changed` edits that call's prompt.
    With `independent`, call 9's prompt does not depend on any answer (it replays even after a change)."""

    @tether.workflow(name="chain")
    async def chain(ctx: tether.Ctx, topic: str) -> str:
        last = topic
        for i in range(1, 11):
            if independent and i == 9:
                prompt = f"step 9 stands alone on {topic}"
            else:
                prompt = f"step {i}{' (edited)' if i == changed else ''}: continue from {last[:40]}"
            out = await ctx.agent(prompt, label=f"c{i}")
            if not (independent and i == 9):
                last = out
        return last

    return chain


def store_digest(url: str) -> str:
    """A digest of every row of every table the store holds."""
    h = hashlib.sha256()
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as c:
            tables = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
            for t in tables:
                h.update(t.encode())
                for row in c.execute(f'SELECT * FROM "{t}" ORDER BY 1, 2'):
                    h.update(repr(row).encode())
        return h.hexdigest()
    import psycopg

    parsed = urlparse(url)
    schema = parse_qs(parsed.query)["schema"][0]
    dsn = url.split("?")[0]
    with psycopg.connect(dsn) as c:
        tables = [r[0] for r in c.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (schema,))]
        for t in tables:
            h.update(t.encode())
            for row in c.execute(f'SELECT * FROM "{schema}"."{t}" ORDER BY 1'):
                h.update(repr(row).encode())
    return h.hexdigest()
