"""A support conversation as a session: three turns with a tool and memory, then a branch from turn 1.

Run: .venv/bin/python examples/support_session.py
"""

from __future__ import annotations

import asyncio
import json
import tempfile

import tether
from tether.testing import Reply, ToolCall


@tether.tool(idempotent=True)
def order_status(order: str) -> str:
    """Look up an order."""
    return f"order {order} left the warehouse yesterday"


def support_model(request: tether.contracts.ChatRequest) -> Reply:
    """A scripted support agent: it looks orders up, remembers the customer's name, and recalls it later."""
    last = request.messages[-1]
    user = next(m.text_content for m in reversed(request.messages) if m.role == "user")
    if last.role == "tool":
        said = "".join(getattr(p, "content", "") for p in last.parts)
        if said.startswith("["):  # what recall found
            notes = json.loads(said)
            return Reply(text=f"You are {notes[0]['value']}." if notes else "I do not know your name yet.")
        return Reply(text=f"Done: {said}.")
    if "order" in user:
        return Reply(tool_calls=[ToolCall("order_status", {"order": user.split()[-1]})])
    if "my name is" in user:
        return Reply(tool_calls=[ToolCall("remember", {"key": "customer-name", "value": user.split()[-1]})])
    if "who am i" in user.lower():
        return Reply(tool_calls=[ToolCall("recall", {"query": "customer name"})])
    earlier = sum(1 for m in request.messages if m.role == "assistant")
    return Reply(text=f"Happy to help ({earlier} earlier replies in this conversation).")


@tether.workflow(name="support")
async def support(ctx: tether.Ctx, prompt: str) -> str:
    history = await ctx.session.history() if ctx.session else ()
    return str(await ctx.agent(prompt, history=history, system="You are a support agent.",
                               tools=[order_status, *ctx.memory.tools()]))


async def main() -> None:
    model = tether.models.fake("fake", script=support_model, prices={"m": tether.Price(input=3.0, output=15.0)})
    with tempfile.TemporaryDirectory() as tmp:
        engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp}/t.db",
                               workflows=[support])
        chat = engine.session("ticket-42", workspace="acme", budget_usd=0.50)
        for prompt in ("hi, my name is Ada", "where is my order 1234", "thanks!"):
            turn = await chat.send(prompt, workflow=support)
            print(f"turn {turn.index} [{turn.status}, {turn.cost_usd:.6f} USD]: {turn.answer}")
        await chat.branch(1)  # a new line from turn 1: turns 2 and 3 stay readable
        turn = await chat.send("who am I?", workflow=support)
        print(f"turn {turn.index} (branched from {turn.parent}): {turn.answer}")
        other = engine.session("ticket-43", workspace="acme")  # same workspace: the memory is shared
        later = await other.send("who am I?", workflow=support)
        print(f"another session of the workspace: {later.answer}")
        for t in await chat.turns():
            print(f"  turn {t.index} parent={t.parent} {t.status} {t.cost_usd:.6f} USD")
        print(f"session spent {await chat.spent_usd():.6f} of 0.50 USD")
        await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
