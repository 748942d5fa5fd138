"""`tether.loops.in_workflow()`: the public way an integration asks whether it runs inside a workflow."""

from __future__ import annotations

from pathlib import Path

import tether
from tether.loops import in_workflow


async def test_in_workflow_is_true_in_a_body_and_its_steps_and_false_outside(tmp_path: Path) -> None:
    seen: list[bool] = []

    def probe() -> bool:
        seen.append(in_workflow())
        return seen[-1]

    @tether.workflow
    async def wf(ctx: tether.Ctx) -> bool:
        seen.append(in_workflow())
        return await ctx.step("probe", probe)

    engine = tether.Engine(store=f"sqlite:///{tmp_path}/t.db")
    try:
        assert in_workflow() is False
        outcome = await engine.run(wf)
        assert outcome.status == "ok" and outcome.value is True
        assert seen == [True, True] and in_workflow() is False
    finally:
        await engine.close()
