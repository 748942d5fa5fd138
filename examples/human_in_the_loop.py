"""Human in the loop: a run suspends on `await_external`, is resolved later, and resumes.

Run: .venv/bin/python examples/human_in_the_loop.py
"""

from __future__ import annotations

import asyncio
import tempfile

import tether


@tether.workflow(name="publish")
async def publish(ctx: tether.Ctx, title: str) -> str:
    draft = await ctx.step("draft", lambda: f"# {title}\n\nBody text.")
    decision = await ctx.await_external("editor-approval")
    return f"published: {draft.splitlines()[0]}" if decision == "yes" else f"shelved: {title}"


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        engine = tether.Engine(store=f"sqlite:///{tmp}/t.db")
        first = await engine.run(publish, {"title": "Tether"}, run_id="post-1")
        print("first:", first.status, "waiting for", first.pending)
        await engine.resolve_external("post-1", "editor-approval", "yes")  # e.g. from a web hook
        done = await engine.resume("post-1", publish, {"title": "Tether"})
        print("after resolve:", done.status, done.value)
        await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
