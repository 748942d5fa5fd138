"""`tether tree RUN_ID`: the agent tree drawn in the terminal (or `--json`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.tree import Tree

from tether.cli.shell import JsonOpt, StoreOpt, console, emit_json, esc, plural, read_store
from tether.contracts.money import usd

if TYPE_CHECKING:
    from tether.journal.tree import AgentNode, TreeReport


def register(app: typer.Typer) -> None:
    app.command()(tree)


def tree(run_id: str, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """RUN_ID's agent tree: who spawned whom, status, tokens, cost, and refused spawns."""
    report: TreeReport = read_store(store, lambda e: e.agent_tree(run_id))
    if json_out:
        emit_json(report.model_dump(mode="json"))
        return
    root = Tree(f"[bold]{esc(run_id)}[/bold] (workflow)" + ("" if report.agents else "  no agents"))
    children: dict[int | None, list[AgentNode]] = {}
    for node in report.agents:
        children.setdefault(node.parent_agent_id, []).append(node)

    def add(branch: Tree, parent: int | None) -> None:
        for node in children.get(parent, []):
            refused = f"  [red]refused: {esc(', '.join(node.refusals))}[/red]" if node.refusals else ""
            color = _color(node.status)
            cut = (f" ({usd(node.spent_usd)} spent + {usd(node.orphaned_usd)} orphaned: {node.cut_calls} cut)"
                   if node.cut_calls or node.orphaned_usd else "")
            money = (f"reused: the source paid {usd(node.reused_usd)} USD" if node.reused
                     else f"{usd(node.cost_usd)} USD{cut}")
            line = (f"#{node.agent_id} {esc(node.label or node.role or 'agent')}  [{color}]{esc(node.status)}"
                    f"[/{color}]  {plural(node.tokens, 'token')}  {plural(node.provider_calls, 'call')}  "
                    f"{money}{refused}")
            add(branch.add(line), node.agent_id)

    add(root, None)
    cost = report.cost  # the run's figures are the cost report's, never a sum of its own
    root.label = (f"{root.label}  {usd(cost.total_usd)} USD"
                  + (f" ({usd(cost.orphaned_usd)} orphaned)" if cost.orphaned_usd else "")
                  + (f" + {usd(cost.reused_usd)} reused (paid by the source)" if cost.reused_calls else ""))
    refused_at_root = [e.detail for e in report.events if e.kind == "spawn_refused" and e.agent_id == 0]
    if refused_at_root:
        root.add(f"[red]refused at the workflow: {esc(', '.join(str(d) for d in refused_at_root))}[/red]")
    console().print(root, soft_wrap=False)  # a line wider than the terminal wraps under its branch, never cut


def _color(status: str) -> str:
    return {"ok": "green", "running": "yellow", "limit": "yellow"}.get(status, "red")
