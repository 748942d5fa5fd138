"""Helpers for the CLI tests: the app module they run, and the checks every error path must pass."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner, Result

from tether.cli.main import app

FLOWS = '''
"""A user's application: workflows and the engine that runs them (fake models, so no keys)."""
import asyncio
import os

from pydantic import BaseModel

import tether
from tether.testing import Reply, ToolCall


class Verdict(BaseModel):
    score: float
    rationale: str


@tether.tool(executor="subprocess")
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


@tether.tool(needs_approval=True)
def save_note(text: str) -> str:
    """Save a note (a human approves each call)."""
    return f"saved: {text}"


@tether.tool
def count_repository_contributors(repository: str) -> int:
    """Count a repository's contributors (a long tool name: narrow terminals must show it whole)."""
    return 40


def answer(request):
    prompt = request.messages[0].text_content
    called = any(m.role == "tool" for m in request.messages)
    if request.tools and any(t.name == "shout" for t in request.tools) and not called:
        return Reply(tool_calls=[ToolCall("shout", {"text": "yes"})], input_tokens=100, output_tokens=10)
    if request.tools and any(t.name == "save_note" for t in request.tools) and not called:
        return Reply(tool_calls=[ToolCall("save_note", {"text": "buy milk"})], input_tokens=100, output_tokens=10)
    if request.tools and any(t.name == "count_repository_contributors" for t in request.tools) and not called:
        return Reply(tool_calls=[ToolCall("count_repository_contributors", {"repository": "tether"})],
                     input_tokens=100, output_tokens=10)
    if called and "Note" in prompt:
        return Reply(text=f"tool said: {request.messages[-1].text_content}", input_tokens=100, output_tokens=10)
    if "Score" in prompt:
        return Reply(output={"score": 7.5, "rationale": "fair [enough]"}, input_tokens=100, output_tokens=20)
    return Reply(text=f"answer to: {prompt}", input_tokens=100, output_tokens=30)


fake = tether.models.fake("fake", script=answer, prices={"m": tether.Price(input=1.0, output=2.0)})


@tether.workflow
async def panel(ctx: tether.Ctx, question: str) -> dict:
    text = await ctx.agent(f"Answer: {question}", tools=[shout], label="answer")
    verdict = await ctx.agent(f"Score: {text}", output=Verdict, label="score")
    return {"score": verdict.score, "rationale": verdict.rationale}


@tether.workflow
async def approve(ctx: tether.Ctx) -> object:
    await ctx.agent("Draft the plan", label="draft")
    return await ctx.await_external("approve")


@tether.workflow
async def note(ctx: tether.Ctx) -> str:
    return await ctx.agent("Note it down", tools=[save_note], label="note")


@tether.workflow
async def survey(ctx: tether.Ctx) -> str:
    return await ctx.agent("Survey the contributors", tools=[count_repository_contributors],
                           label="survey-of-repository-contributors")


@tether.workflow
async def pick(ctx: tether.Ctx) -> object:
    return await ctx.await_external("color", schema={"enum": ["red", "green"]})


@tether.workflow
async def items(ctx: tether.Ctx) -> object:
    return {"items": [True, None], "tag": "[bold]x[/bold]"}


@tether.workflow
async def boom(ctx: tether.Ctx) -> None:
    raise ValueError("the [input] was wrong")


@tether.workflow
async def spend(ctx: tether.Ctx) -> str:
    return await ctx.agent("Answer at length", est_cost=5.0)


@tether.workflow
async def slow(ctx: tether.Ctx) -> str:
    async def wait() -> str:
        await asyncio.sleep(60)
        return "late"

    return await ctx.step("wait", wait)


engine = tether.Engine(
    models=[fake], routing={"loop": "fake:m"}, store=os.environ.get("FLOWS_STORE", "memory://"),
    workflows=[panel, approve, note, survey, pick, items, boom, spend, slow],
    lease_ttl_s=float(os.environ.get("FLOWS_LEASE_TTL_S", "60")),
)
'''

BARE = '''
import tether


@tether.workflow
async def ask(ctx: tether.Ctx, q: str = "hi") -> str:
    return await ctx.agent(q)
'''


@dataclass
class AppDir:
    """The working directory of a CLI test, its store, and a way to invoke `tether` in-process."""

    path: Path
    store: str
    runner: CliRunner

    def __call__(self, *argv: str) -> Result:
        return self.runner.invoke(app, list(argv))

    def json(self, *argv: str) -> object:
        result = self(*argv, "--json")
        assert result.stdout.strip(), (result.exit_code, result.stderr)
        return json.loads(result.stdout)

    def run_line(self, line: str) -> Result:
        """Invoke a `tether ...` command line exactly as the CLI printed it."""
        argv = shlex.split(line)
        assert argv[0] == "tether"
        return self(*argv[1:])


def assert_one_line_error(result: Result, code: int, *fragments: str) -> str:
    """The promise of every error path: exit `code`, one line on stderr, nothing on stdout, no traceback."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error ("), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]

