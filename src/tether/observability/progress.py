"""`tether.progress(handle)`: a live terminal tree of a run's agents, or plain lines off a TTY."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.tree import Tree

from tether.contracts.events import Event
from tether.engine.handle import RunHandle
from tether.engine.outcome import RunOutcome


@dataclass
class _Agent:
    label: str
    depth: int
    started: float
    status: str = "working"
    tokens: int = 0
    cost: float = 0.0
    ended: float | None = None


@dataclass
class _View:
    """What the progress view knows, folded from the event stream."""

    agents: dict[int, _Agent] = field(default_factory=dict)
    spent: float = 0.0
    ceiling: float | None = None

    def apply(self, event: Event) -> str | None:
        """Fold one event; returns a plain line worth printing, if any."""
        d = event.data
        agent_id = d.get("agent_id")
        if event.type == "agent:start" and isinstance(agent_id, int):
            self.agents[agent_id] = _Agent(str(d.get("label") or f"agent {agent_id}"), int(d.get("depth") or 1),
                                           event.ts)
            return f"start  #{agent_id} {self.agents[agent_id].label}" + (" (replayed)" if event.replayed else "")
        if event.type == "agent:end" and isinstance(agent_id, int):
            agent = self.agents.setdefault(agent_id, _Agent(str(d.get("label") or agent_id), 1, event.ts))
            usage = d.get("usage") or {}
            agent.status = str(d.get("status") or "ok")
            agent.tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
            agent.cost = float(d.get("cost") or 0.0)
            agent.ended = event.ts
            return f"end    #{agent_id} {agent.label}: {agent.status}, {agent.tokens} tokens"
        if event.type == "budget:update":
            self.spent = float(d.get("spent") or 0.0)
            self.ceiling = d.get("ceiling")
        if event.type == "run:end":
            return f"run {event.run_id}: {d.get('status')}, {float(d.get('cost') or 0.0):.6f} USD"
        return None

    def render(self, run_id: str) -> Tree:
        budget = f"{self.spent:.4f} USD" + (f" of {self.ceiling:.4f}" if self.ceiling else "")
        root = Tree(f"[bold]{run_id}[/bold]  spent {budget}")
        now = time.time()
        for agent_id, a in sorted(self.agents.items()):
            elapsed = (a.ended or now) - a.started
            color = {"working": "yellow", "ok": "green"}.get(a.status, "red")
            root.add(f"{'  ' * (a.depth - 1)}#{agent_id} {a.label}  [{color}]{a.status}[/]  {elapsed:5.1f}s  "
                     f"{a.tokens} tokens  {a.cost:.6f} USD")
        return root


async def progress(handle: RunHandle, *, console: Console | None = None) -> RunOutcome:
    """Show the run while it goes (rich tree on a TTY, plain lines otherwise) and return its outcome."""
    console = console or Console()
    view = _View()
    if not console.is_terminal:
        async for event in handle.events:
            line = view.apply(event)
            if line:
                console.print(line, highlight=False)
        return await handle
    with Live(view.render(handle.run_id), console=console, refresh_per_second=8) as live:
        async for event in handle.events:
            view.apply(event)
            live.update(view.render(handle.run_id))
    return await handle


__all__ = ["progress"]
