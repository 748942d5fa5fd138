"""`ctx.agent` through the engine: journaled, replayed for free, resumable, identity-stable."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall


class Verdict(BaseModel):
    score: float
    rationale: str


@tether.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def scripted(request: ChatRequest) -> Reply:
    last = request.messages[-1]
    names = {t.name for t in request.tools}
    if "emit_result" in names:
        return Reply(
            tool_calls=[ToolCall("emit_result", {"score": 7, "rationale": "fine"})], input_tokens=50, output_tokens=10
        )
    if "add" in names and last.role != "tool":
        return Reply(tool_calls=[ToolCall("add", {"a": 2, "b": 3})], input_tokens=100, output_tokens=10)
    if last.role == "tool":
        return Reply(text=f"sum={last.parts[0].content}", input_tokens=120, output_tokens=5)  # type: ignore[union-attr]
    return Reply(text="plain", input_tokens=10, output_tokens=5)


def make_engine(store: str, model: Any, **kw: Any) -> tether.Engine:
    async def no_sleep(_: float) -> None:
        return None

    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store, sleep=no_sleep, **kw)


@tether.workflow(name="three")
async def three(ctx: tether.Ctx) -> dict[str, Any]:
    a = await ctx.agent("hello", label="plain")
    b = await ctx.agent("add 2 and 3", tools=[add], label="tools")
    c = await ctx.agent("score it", output=Verdict, label="structured")
    assert isinstance(c, Verdict)
    return {"a": a, "b": b, "c": c.score}


PRICES = {"m": tether.Price(input=1.0, output=2.0)}


async def test_three_agents_resume_with_zero_model_calls_and_pass_dry_run(tmp_path: Any) -> None:
    model = tether.models.fake("fake", script=scripted, prices=PRICES)
    engine = make_engine(f"sqlite:///{tmp_path}/t.db", model)
    first = await engine.run(three, run_id="r", budget_usd=1.0)
    assert first.status == "ok" and first.value == {"a": "plain", "b": "sum=5", "c": 7.0}
    calls = model.calls
    assert calls == 4 and first.cost.total_usd > 0
    again = await engine.resume("r", three)
    assert again.value == first.value and model.calls == calls
    assert again.cost.total_usd == first.cost.total_usd
    dry = await tether.testing.replay_strict(engine, "r", three)
    assert dry.status == "ok" and model.calls == calls


async def _keys(engine: tether.Engine, run_id: str) -> list[str]:
    return [e.key for e in await engine.inspect(run_id) if e.kind == "agent" and e.status == "running"]


@pytest.mark.parametrize(
    ("change", "reruns"),
    [
        ("label", 0),
        ("retries-and-limits", 0),
        ("tool-implementation", 0),
        ("prompt", 1),
        ("schema-fields", 1),
        ("tool-parameters", 1),
    ],
)
async def test_what_changes_identity_and_what_does_not(tmp_path: Any, change: str, reruns: int) -> None:
    model = tether.models.fake("fake", script=scripted, prices=PRICES)
    engine = make_engine(f"sqlite:///{tmp_path}/t.db", model)

    def flow(variant: str) -> tether.Workflow:
        @tether.tool(name="add")
        def add_v2(a: int, b: int) -> int:
            """Add two integers."""
            return b + a

        @tether.tool(name="add")
        def add_v3(a: int, b: int, c: int = 0) -> int:
            """Add two integers."""
            return a + b + c

        class Verdict2(BaseModel):
            score: float
            rationale: str
            extra: str = ""

        @tether.workflow(name="ident")
        async def ident(ctx: tether.Ctx) -> list[Any]:
            tool = {"tool-implementation": add_v2, "tool-parameters": add_v3}.get(variant, add)
            out_cls = Verdict2 if variant == "schema-fields" else Verdict
            a = await ctx.agent(
                "prompt two" if variant == "prompt" else "add",
                tools=[tool],
                label="L2" if variant == "label" else "L1",
                max_turns=9 if variant == "retries-and-limits" else None,
            )
            b = await ctx.agent("score", output=out_cls)
            c = await ctx.agent("other", label="other")
            return [a, b.score, c]

        return ident

    await engine.run(flow("base"), run_id="r")
    before = model.calls
    again = await engine.resume("r", flow(change))
    assert again.status == "ok"
    assert again.replay.misses == reruns
    assert (model.calls - before > 0) == bool(reruns)


async def test_an_approval_suspends_the_run_and_resumes_the_same_turn(tmp_path: Any) -> None:
    executed: list[int] = []

    @tether.tool(needs_approval=True)
    def deploy(version: int) -> str:
        """Deploy a version."""
        executed.append(version)
        return f"deployed {version}"

    def script(request: ChatRequest) -> Reply:
        if request.messages[-1].role == "tool":
            return Reply(text="done: " + request.messages[-1].parts[0].content)  # type: ignore[union-attr]
        return Reply(tool_calls=[ToolCall("deploy", {"version": 3})])

    model = tether.models.fake("fake", script=script)

    @tether.workflow(name="ship")
    async def ship(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("ship v3", tools=[deploy]))

    engine = make_engine(f"sqlite:///{tmp_path}/t.db", model)
    first = await engine.run(ship, run_id="r")
    assert first.status == "suspended" and len(first.pending) == 1 and executed == []
    calls = model.calls
    for typo in ("alow", "Allow", "yes", True, {"decision": "allow"}):  # only allow or deny, from any caller
        with pytest.raises(tether.InvalidResolutionError, match="exactly 'allow' or 'deny'"):
            await engine.resolve_external("r", first.pending[0], typo)
    assert (await engine.run_meta("r")).status == "suspended" and executed == []  # nothing was journaled
    assert await engine.resolve_external("r", first.pending[0], "allow")
    done = await engine.resume("r", ship)
    assert done.status == "ok" and done.value == "done: deployed 3"
    assert executed == [3]
    assert model.calls == calls + 1  # only the turn after the tool: the asking turn is not repeated


async def test_a_deny_rule_gives_the_model_an_error_result(tmp_path: Any) -> None:
    @tether.tool
    def rm_all() -> str:
        """Delete everything."""
        raise AssertionError("must never run")

    def script(request: ChatRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "tool":
            return Reply(text="blocked: " + str(last.parts[0].is_error))  # type: ignore[union-attr]
        return Reply(tool_calls=[ToolCall("rm_all", {})])

    model = tether.models.fake("fake", script=script)
    engine = make_engine(f"sqlite:///{tmp_path}/t.db", model, permissions=tether.Permissions(deny=["rm_*"]))

    @tether.workflow(name="danger")
    async def danger(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("clean up", tools=[rm_all]))

    assert (await engine.run(danger, run_id="r")).value == "blocked: True"


async def test_failover_changes_only_served_by(tmp_path: Any) -> None:
    primary = tether.models.fake("p", script=[Reply(error="transport")] * 3)
    backup = tether.models.fake("b", script=[Reply(text="from backup")])
    engine = tether.Engine(
        models=[primary, backup],
        store=f"sqlite:///{tmp_path}/t.db",
        routing={"loop": tether.ModelSpec("p:m", fallbacks=("b:m",))},
        sleep=lambda _: __import__("asyncio").sleep(0),
    )

    @tether.workflow(name="fo")
    async def fo(ctx: tether.Ctx) -> Any:
        return await ctx.agent("hi", full=True)

    out = await engine.run(fo, run_id="r")
    assert out.value.served_by == "b:m" and out.value.output == "from backup"
    plain = tether.Engine(models=[primary, backup], store=f"sqlite:///{tmp_path}/u.db", routing={"loop": "p:m"})
    backup.push(Reply(text="x"))
    primary.push(Reply(text="y"))
    await plain.run(fo, run_id="r")
    assert await _keys(engine, "r") == await _keys(plain, "r")


async def test_max_turns_settles_limit_and_on_error_none_drops(tmp_path: Any) -> None:
    model = tether.models.fake("fake", script=lambda req: Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 1})]))
    engine = make_engine(f"sqlite:///{tmp_path}/t.db", model)

    @tether.workflow(name="loop")
    async def loop(ctx: tether.Ctx) -> list[Any]:
        full = await ctx.agent("go", tools=[add], max_turns=2, full=True)
        dropped = await ctx.agent("go again", tools=[add], max_turns=2, on_error="none")
        return [full.status, dropped]

    out = await engine.run(loop, run_id="r")
    assert out.value == ["limit", None] and len(out.dropped) == 1
    assert model.calls == 4
    again = await engine.resume("r", loop)
    assert again.value == out.value and model.calls == 4  # memoized limit replays


async def test_an_agent_error_raises_agent_call_error_with_the_value(tmp_path: Any) -> None:
    model = tether.models.fake("fake", script=[Reply(error="terminal", message="401 bad key")])
    engine = make_engine(f"sqlite:///{tmp_path}/t.db", model)

    @tether.workflow(name="err")
    async def err(ctx: tether.Ctx) -> Any:
        return await ctx.agent("hi")

    out = await engine.run(err, run_id="r")
    assert out.status == "error" and isinstance(out.error, tether.AgentCallError)
    assert out.error.error.kind == "terminal"
