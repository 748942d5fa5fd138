"""`tether.progress(handle)`: a live terminal tree of a run's agents, or plain lines off a TTY.

The header shows spend against every ceiling (USD, tree tokens) with a bar and a forecast from the
recent draw rate; each agent shows its status, timer, tokens and USD as they stream; refused spawns
and budget refusals hang on the tree where they happened. Everything is folded from typed events, so the
view watches anything shaped like a run handle (`Watched`) and imports nothing from the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Generator
from typing import Any, Protocol, TypeVar

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text
from rich.tree import Tree

from tether.contracts.events import (
    AgentEnd,
    AgentStart,
    BudgetRefused,
    Event,
    RunEnd,
    RunStart,
    RunWarning,
    SpawnRefused,
)
from tether.contracts.money import usd
from tether.observability.view import AgentRow, RunView

OutcomeT = TypeVar("OutcomeT", covariant=True)

BAR_WIDTH = 24
LABEL_WIDTH = 32
STATUS_STYLE = {"working": "yellow", "ok": "green", "running": "yellow", "suspended": "cyan", "limit": "magenta"}


class Watched(Protocol[OutcomeT]):
    """What `progress` watches (a `tether.RunHandle`): the run's id, its live events, and its outcome when awaited."""

    @property
    def run_id(self) -> str: ...

    @property
    def events(self) -> AsyncIterator[Event]: ...

    def __await__(self) -> Generator[Any, None, OutcomeT]: ...


def _bar(spent: float, ceiling: float) -> Text:
    frac = 1.0 if ceiling <= 0 else min(1.0, max(0.0, spent / ceiling))
    full = round(frac * BAR_WIDTH)
    style = "red" if frac >= 0.9 else "yellow" if frac >= 0.6 else "green"
    return Text.assemble(("[", "dim"), ("█" * full, style), ("░" * (BAR_WIDTH - full), "dim"), ("]", "dim"))


def _amount(unit: str, value: float) -> str:
    return usd(value) if unit == "USD" else f"{int(value):,}"


def _header(view: RunView, now: float) -> RenderableType:
    status = view.status
    elapsed = ((view.ended or now) - view.started) if view.started is not None else 0.0
    title = Text.assemble(
        (view.run_id, "bold"), f"  {view.workflow}  ", (status, STATUS_STYLE.get(status, "red bold")),
        f"  {elapsed:.1f}s",
    )
    lines: list[RenderableType] = [title]
    for unit, spent, ceiling in view.ceilings():
        pct = 100.0 * spent / ceiling if ceiling > 0 else 100.0
        figures = f" {_amount(unit, spent)} of {_amount(unit, ceiling)} {unit} ({pct:.0f}%)"
        lines.append(Text.assemble(f"{unit:<7}", _bar(spent, ceiling), figures))
    if view.ceiling_usd is None:
        lines.append(Text(f"USD    spent {usd(view.spent_usd)} (no ceiling)"))
    if view.resumed:
        lines.append(Text(f"restored from the journal: {usd(view.restored_usd)} USD", style="cyan"))
    forecast = view.forecast(now)
    if forecast is not None:
        lines.append(Text(f"forecast {forecast.text()}", style="red" if forecast.reached else "bold"))
    if view.status != "running":
        cost = view.cost_usd if view.cost_usd is not None else view.spent_usd
        lines.append(Text(f"{view.status}: {usd(cost)} USD", style=STATUS_STYLE.get(view.status, "red bold")))
    return Group(*lines)


def _agent_line(a: AgentRow, now: float) -> Text:
    elapsed = (a.ended or now) - a.started
    status = a.status + (f" ({a.note})" if a.note else "")
    label = a.label if len(a.label) <= LABEL_WIDTH else a.label[: LABEL_WIDTH - 1] + "…"
    return Text.assemble(
        (f"#{a.agent_id} {label}", "bold"), "  ", (status, STATUS_STYLE.get(a.status, "red")),
        f"  {elapsed:5.1f}s  {a.tokens:,} tok  {usd(a.usd)} USD", (" (replayed)" if a.replayed else "", "cyan"),
    )


def render(view: RunView, now: float | None = None) -> RenderableType:
    """The whole frame: the header, then the agent tree with its refusals."""
    now = time.time() if now is None else now
    tree = Tree(_header(view, now), guide_style="dim")

    def grow(node: Tree, parent: int | None) -> None:
        for a in sorted(view.children(parent), key=lambda r: r.agent_id):
            grow(node.add(_agent_line(a, now)), a.agent_id)
        for r in view.refusals:
            if r.parent == parent or (parent is None and r.parent not in view.agents):
                label = "budget refused" if r.cap == "usd" else f"spawn refused ({r.cap})"
                node.add(Text(f"✗ {label}: {r.what[:80]}", style="red"))

    grow(tree, None)
    return tree


def line(view: RunView, event: Event) -> str | None:
    """The plain line worth printing for one (already folded) event, off a terminal."""
    if isinstance(event, RunStart):
        limits = [f"{_amount(u, c)} {u}" for u, _, c in view.ceilings()]
        text = f"run {event.run_id}: {event.workflow}" + (f", ceilings {', '.join(limits)}" if limits else "")
        return text + (f", resumed with {usd(event.spent_usd)} USD restored" if event.resumed else "")
    if isinstance(event, AgentStart) and event.agent_id is not None:
        replayed = " (replayed)" if event.replayed else ""
        return f"start  #{event.agent_id} {view.agents[event.agent_id].label}{replayed}"
    if isinstance(event, AgentEnd) and event.agent_id is not None and event.agent_id in view.agents:
        a = view.agents[event.agent_id]
        note = f" ({a.note})" if a.note else ""
        return f"end    #{a.agent_id} {a.label}: {a.status}{note}, {a.tokens} tokens, {usd(a.usd)} USD"
    if isinstance(event, SpawnRefused):
        return f"refused spawn of #{event.agent_id} ({event.detail}): {event.goal[:80]}"
    if isinstance(event, BudgetRefused):
        return f"refused {event.what}: {event.message}"
    if isinstance(event, RunWarning):
        return f"warning: {event.message}"
    if isinstance(event, RunEnd):
        against = f" of {usd(view.ceiling_usd)}" if view.ceiling_usd is not None else ""
        return f"run {event.run_id}: {event.status}, {usd(event.cost_usd)} USD spent{against}"
    return None


async def progress(
    handle: Watched[OutcomeT], *, console: Console | None = None, refresh_s: float = 0.25
) -> OutcomeT:
    """Show the run while it goes (a live tree on a TTY, plain lines otherwise) and return its outcome."""
    console = console or Console(emoji=False)  # user text (labels, run ids) is never a :shortcode:
    view = RunView(run_id=handle.run_id)
    if not console.is_terminal:
        async for event in handle.events:
            view.apply(event)
            text = line(view, event)
            if text:
                console.print(text, highlight=False, soft_wrap=True)
        return await handle
    with Live(render(view), console=console, auto_refresh=False, transient=False) as live:
        ticker = asyncio.create_task(_tick(live, view, refresh_s))  # timers and the forecast move between events
        try:
            last = 0.0
            async for event in handle.events:
                view.apply(event)
                now = time.monotonic()
                if now - last >= 0.1 or isinstance(event, RunEnd | AgentEnd | SpawnRefused | BudgetRefused):
                    live.update(render(view), refresh=True)
                    last = now
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        live.update(render(view), refresh=True)
    return await handle


async def _tick(live: Live, view: RunView, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        live.update(render(view), refresh=True)


__all__ = ["RunView", "line", "progress", "render"]
