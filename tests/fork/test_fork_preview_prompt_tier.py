"""A fork preview on an OpenAI-compatible server the adapter does not know: structured output goes through the
prompt tier (JSON asked for in the system prompt, parsed from the text), and the preview replays the source's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import openai
from pydantic import BaseModel

import tether
from tether.testing import Reply
from tether.testing.wire import responder

BASE = "http://127.0.0.1:11434/v1"
TITLE = "Tides of Brittany"


class Draft(BaseModel):
    title: str
    words: int


def answer(body: dict[str, Any]) -> Reply:
    """The server: the writer's JSON (asked for in the system prompt), else the editor's text."""
    system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
    if "JSON schema" in system:
        return Reply(text=json.dumps({"title": TITLE, "words": 120}), input_tokens=40, output_tokens=12)
    return Reply(text=f"polished: {body['messages'][-1]['content']}", input_tokens=30, output_tokens=8)


class Server:
    """The far end of a mock transport: every request body it was sent, answered by `answer`."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self._answer = responder("openai-compatible", answer)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(json.loads(request.content))
        return self._answer(request)


def article(writer_prompt: str) -> Any:
    @tether.workflow(name="article")
    async def run(ctx: tether.Ctx, topic: str) -> str:
        draft = await ctx.agent(f"{writer_prompt} {topic}", output=Draft, label="writer")
        return await ctx.agent(f"Polish the title: {draft.title}", label="editor")

    return run


def engine(server: Server, store: str) -> tether.Engine:
    client = openai.AsyncOpenAI(api_key="unused", base_url=BASE, max_retries=0,
                                http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(server.handle)))
    model = tether.models.openai_compatible("ollama", BASE, client=client, local=True)
    return tether.Engine(models=[model], routing={"loop": "ollama:qwen3:8b"}, store=store)


async def test_a_preview_replays_the_sources_prompt_tier_output(tmp_path: Path) -> None:
    server, store = Server(), f"sqlite:///{tmp_path}/tether.db"
    eng = engine(server, store)
    try:
        source = await eng.run(article("Draft a title on"), {"topic": "tides"}, run_id="src")
        assert source.status == "ok", source.error
        assert source.value == f"polished: Polish the title: {TITLE}"
        assert eng.router.adapters["ollama"].caps("qwen3:8b").structured_output == "prompt"
        sent = len(server.bodies)
        preview = await eng.fork("src", "src-b", article("Draft a short title on"), preview=True)
    finally:
        await eng.close()
    assert len(server.bodies) == sent  # the preview sent nothing
    assert (preview.status, preview.stopped) == ("ok", None)
    assert [c.label for c in preview.new_calls] == ["writer"]
    # the editor's prompt is built from the writer's output: it replays only if the preview gave the source's
    assert [c.label for c in preview.reused] == ["editor"]
    assert [(c.label, c.reason) for c in preview.invalidated] == [("writer", "prompt")]
