"""The live view in a real terminal (tmux), and the forecast it draws from the recent draw rate."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tether.events import BudgetDraw, BudgetUpdate, RunStart
from tether.observability.view import RunView

HERE = Path(__file__).parent
AGENT_LINE = re.compile(r"#(\d+) (.+?)  (\w+)(?: \([^)]*\))?\s+[\d.]+s\s+([\d,]+) tok\s+([\d.]+) USD")


def capture_frames(tmp_path: Path, argv: list[str] | None = None, cwd: Path = HERE) -> list[str]:
    """Run a command (default: live_child.py) in a tmux pane; save the screen every 0.2 s until it exits."""
    tmux = shutil.which("tmux")
    assert tmux is not None, "the live view test needs tmux"
    server = f"tether-obs-{uuid.uuid4().hex[:8]}"  # a private tmux server: nothing else is touched
    env = os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE)])
    argv = argv or [str(HERE / "live_child.py"), f"sqlite:///{tmp_path}/t.db"]
    command = (f"cd {cwd} && env -u COLUMNS -u LINES PYTHONPATH={env} {sys.executable} {' '.join(argv)}; "
               "echo __DONE__; sleep 60")
    frames_dir = tmp_path / f"frames-{uuid.uuid4().hex[:4]}"
    frames_dir.mkdir()
    frames: list[str] = []
    subprocess.run([tmux, "-L", server, "new-session", "-d", "-s", "live", "-x", "130", "-y", "40", command],
                   check=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            time.sleep(0.2)
            screen = subprocess.run([tmux, "-L", server, "capture-pane", "-p", "-t", "live"],
                                    capture_output=True, text=True, check=True).stdout
            frames.append(screen)
            (frames_dir / f"{len(frames):03d}.txt").write_text(screen)
            if "__DONE__" in screen:
                break
    finally:
        subprocess.run([tmux, "-L", server, "kill-server"], check=False)
    assert frames and "__DONE__" in frames[-1], "the child did not finish in time"
    return frames


def test_the_live_view_in_a_terminal_tells_the_truth(tmp_path: Path) -> None:
    frames = capture_frames(tmp_path)
    final = frames[-1]
    assert "OUTCOME exhausted" in final
    working_with_spend = [
        (frame, m) for frame in frames for m in AGENT_LINE.finditer(frame)
        if m.group(3) == "working" and float(m.group(5)) > 0 and m.group(2).startswith("spawn:")
    ]
    assert working_with_spend, "per-agent USD shows while the agents still work"
    assert any(int(m.group(4).replace(",", "")) > 0 for _, m in working_with_spend), "and their tokens"
    assert len({m.group(1) for m in AGENT_LINE.finditer(final)}) == 6, "six agents on the tree"
    assert any("✗ spawn refused (agents): survey region" in f for f in frames), "the refused spawn"
    assert any(re.search(r"forecast ~\d+ turns? left at this rate, (~\d+s|<1s) to exhaustion", f) for f in frames)
    # the hard ceiling stops the run at (or just below) the ceiling: spend plus in-flight worst cases never pass it
    assert re.search(r"USD\s+\[█+\] 0\.(39|40)\d* of 0\.40 USD \((9\d|100)%\)", final), "spend against the ceiling"
    assert "live  survey  exhausted" in final and re.search(r"exhausted: 0\.(39|40)", final)
    ends = {m.group(1): m.group(3) for m in AGENT_LINE.finditer(final)}
    assert set(ends.values()) <= {"cancelled", "error", "limit", "ok"}, "no agent is left `working` at the end"


def test_the_forecast_divides_what_is_left_by_the_recent_draw_rate() -> None:
    view = RunView()
    view.apply(RunStart(run_id="r", ts=100.0, workflow="w", ceiling_usd=1.0, ceiling_tokens=10_000))
    for i, (spent, tokens) in enumerate([(0.1, 1_000), (0.2, 2_000), (0.3, 3_000), (0.4, 4_000)]):
        view.apply(BudgetUpdate(run_id="r", ts=101.0 + i, model="fake:m", usd=0.1, spent_usd=spent,
                                ceiling_usd=1.0, spent_tokens=tokens, ceiling_tokens=10_000))
        view.apply(BudgetDraw(run_id="r", ts=101.0 + i, agent_id=1, step=i + 1, tokens=1_000, usd=0.15))
    forecast = view.forecast(now=104.0)
    assert forecast is not None
    # 0.6 USD left at 0.15 per turn: 4 turns (tokens allow 6); 0.1 USD per second: 6 s
    assert forecast.turns_left == 4 and forecast.seconds_left == pytest.approx(6.0)
    assert forecast.text() == "~4 turns left at this rate, ~6s to exhaustion"
    view.apply(BudgetUpdate(run_id="r", ts=105.0, model="fake:m", usd=0.6, spent_usd=1.0, ceiling_usd=1.0,
                            spent_tokens=5_000, ceiling_tokens=10_000))
    assert view.forecast(now=105.0) is not None and view.forecast(now=105.0).text() == "ceiling reached"  # type: ignore[union-attr]


def test_no_forecast_without_a_ceiling() -> None:
    view = RunView()
    view.apply(RunStart(run_id="r", ts=1.0, workflow="w"))
    assert view.forecast(now=2.0) is None


STEP_FLOW = """
import asyncio
import tether

@tether.workflow(name="steps")
async def steps(ctx):
    async with ctx.phase("only"):
        await ctx.step("wait", lambda: asyncio.sleep(0.5))
        return 2
"""


def test_tether_run_shows_the_live_view_on_a_terminal_by_default(tmp_path: Path) -> None:
    (tmp_path / "stepflow.py").write_text(STEP_FLOW)
    argv = ["-m", "tether.cli.main", "run", "stepflow:steps", "--run-id", "tty", "--budget", "0.5",
            "--store", f"sqlite:///{tmp_path}/t.db"]
    final = capture_frames(tmp_path, argv, cwd=tmp_path)[-1]
    assert re.search(r"tty  steps  ok", final), "the live view's header, on a terminal without --progress"
    assert "USD    [" in final and "0.00 of 0.50 USD (0%)" in final
    assert "run tty: ok" in final and "value    2" in final  # the outcome printed after the view


def test_the_header_has_a_bar_for_every_ceiling() -> None:
    from io import StringIO

    from rich.console import Console

    from tether.observability.progress import render

    view = RunView()
    view.apply(RunStart(run_id="r", ts=1.0, workflow="w", ceiling_usd=2.0, spent_usd=0.5, ceiling_tokens=1_000,
                        spent_tokens=250, resumed=True))
    console = Console(file=StringIO(), width=100, color_system=None)
    console.print(render(view, now=2.0))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "USD    [██████░░░░░░░░░░░░░░░░░░] 0.50 of 2.00 USD (25%)" in text
    assert "tokens [██████░░░░░░░░░░░░░░░░░░] 250 of 1,000 tokens (25%)" in text
    assert "restored from the journal: 0.50 USD" in text
