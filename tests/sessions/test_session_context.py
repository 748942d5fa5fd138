"""A long session under a context limit: the history its turns carry is compacted like any transcript, so every
request fits, the newest turns stay whole and the oldest are the ones dropped (docs/sessions.md, docs/agents.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tether
from tether.agents.dispatch import estimate_input_tokens
from tether.contracts.messages import ChatRequest
from tether.testing import Reply

LIMIT = 1_500
TURNS = 40


async def test_a_forty_turn_session_under_a_context_limit_sends_no_request_past_it(tmp_path: Path) -> None:
    sent: list[tuple[int, list[str]]] = []

    def script(request: ChatRequest) -> Reply:
        texts = [m.text_content for m in request.messages if m.role == "user"]
        sent.append((estimate_input_tokens(request), texts))
        return Reply(text=f"answer to {texts[-1]}: " + "detail " * 40, input_tokens=100, output_tokens=60)

    @tether.workflow(name="chat")
    async def chat(ctx: tether.Ctx, prompt: str) -> Any:
        assert ctx.session is not None
        history = await ctx.session.history()
        return await ctx.agent(prompt, history=history, max_output_tokens=60,
                               context=tether.Context(max_input_tokens=LIMIT, keep_last=2))

    model = tether.models.fake("fake", script=script, prices={"m": tether.Price(input=1.0, output=2.0)})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db",
                           workflows=[chat])
    try:
        session = engine.session("long")
        for i in range(1, TURNS + 1):
            turn = await session.send(f"question {i}", workflow=chat)
            assert turn.status == "ok", turn
    finally:
        await engine.close()
    assert len(sent) == TURNS
    assert max(est for est, _ in sent) <= LIMIT
    last = sent[-1][1]
    assert last[0] == "question 1"  # the first message stays
    assert "earlier messages were dropped" in last[1]  # where the history was compacted, said to the model
    assert last[-2:] == [f"question {TURNS - 1}", f"question {TURNS}"]  # the newest exchanges stay whole
    assert "question 20" not in last  # the middle of the conversation was compacted away
    assert any(est > LIMIT // 2 for est, _ in sent[10:])  # the history did grow up to the limit
