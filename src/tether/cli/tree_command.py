"""`tether tree RUN_ID`: the agent tree drawn in the terminal (or `--json`)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.tree import Tree

from tether.cli.main import JsonOpt, StoreOpt, _read, app
from tether.journal.tree import AgentNode, TreeReport


@app.command()
def tree(run_id: str, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """RUN_ID's agent tree: who spawned whom, status, tokens, cost, and refused spawns."""
    report: TreeReport = _read(store, lambda e: e.agent_tree(run_id))
    if json_out:
        print(report.model_dump_json())
        return
    if not report.agents:
        Console().print(f"no agents in run {run_id!r}")
        raise typer.Exit(1)
    root = Tree(f"[bold]{run_id}[/bold] (workflow)")
    children: dict[int | None, list[AgentNode]] = {}
    for node in report.agents:
        children.setdefault(node.parent_agent_id, []).append(node)

    def add(branch: Tree, parent: int | None) -> None:
        for node in children.get(parent, []):
            refused = f"  [red]refused: {', '.join(node.refusals)}[/red]" if node.refusals else ""
            line = (f"#{node.agent_id} {node.label or node.role or 'agent'}  [{_color(node.status)}]{node.status}"
                    f"[/]  {node.tokens} tokens  {node.cost_usd:.6f} USD{refused}")
            add(branch.add(line), node.agent_id)

    add(root, None)
    refused_at_root = [e.detail for e in report.events if e.kind == "spawn_refused" and e.agent_id == 0]
    if refused_at_root:
        root.add(f"[red]refused at the workflow: {', '.join(str(d) for d in refused_at_root)}[/red]")
    Console(highlight=False).print(root)


def _color(status: str) -> str:
    return {"ok": "green", "running": "yellow", "limit": "yellow"}.get(status, "red")
