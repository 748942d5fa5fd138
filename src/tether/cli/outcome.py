"""How a run's outcome reads on the shell: status, value, cost against the ceiling, the error, what to do next."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from tether.cli.app import Resolved, configured_store, no_model_hint
from tether.cli.cost_view import lost_lines, orphan_line, reused_line, total_phrase
from tether.cli.shell import STATUS_EXIT, console, emit_json, esc, one_line, plural
from tether.contracts.errors import ConfigError, TetherError

if TYPE_CHECKING:
    from tether.engine.outcome import RunOutcome


class ErrorView(BaseModel):
    """An outcome's error as `--json` prints it."""

    code: str
    type: str
    message: str
    data: dict[str, Any] = {}


def jsonable(value: Any) -> Any:
    return to_jsonable_python(value, fallback=str)


def error_view(error: Any) -> ErrorView | None:
    """The error of a `RunOutcome` (an exception, or the journal's `{type, message, code}` form)."""
    if error is None:
        return None
    if isinstance(error, TetherError):
        return ErrorView(code=error.code, type=type(error).__name__, message=error.message, data=jsonable(error.data))
    if isinstance(error, dict):
        kind = str(error.get("type") or "Error")
        code = str(error.get("code") or ("cancelled" if kind == "Cancelled" else "error"))
        data = error.get("data")
        return ErrorView(code=code, type=kind, message=str(error.get("message") or ""),
                         data=data if isinstance(data, dict) else {})
    return ErrorView(code="error", type=type(error).__name__, message=str(error))


def needs_a_model(error: Any) -> bool:
    """A routing failure: the workflow called a model the engine does not have."""
    return isinstance(error, ConfigError) and ("role" in error.data or "ref" in error.data)


def store_flag(url: str | None) -> str:
    """` --store URL` when later commands must name the store (it is not the one in force by default)."""
    if url is None or url == configured_store(None):
        return ""
    return f" --store {shlex.quote(url)}"


def resolve_commands(outcome: RunOutcome, store: str | None, hints: Mapping[str, str] | None = None) -> list[str]:
    """The exact `tether resolve` line for each pending key; VALUE is `allow|deny` for a tool approval
    (and an enum's values), as `hints` has them."""
    run = shlex.quote(outcome.run_id)
    shown = hints or {}
    return [f"tether resolve {run} {shlex.quote(key)} {shown.get(key, 'VALUE')}{store_flag(store)}"
            for key in outcome.pending]


def resume_command(outcome: RunOutcome, resolved: Resolved, workflow: str | None, store: str | None) -> str:
    """The `tether resume` that continues the run, pasteable as printed: it names the same store as the
    `pending` lines (an app's or module's engine would otherwise resume on the store its code names)."""
    parts = ["tether resume", shlex.quote(outcome.run_id)]
    if workflow:
        parts.append(f"--workflow {shlex.quote(workflow)}")
    if resolved.source == "app" and resolved.target:
        parts.append(f"--app {shlex.quote(resolved.target)}")
    return " ".join(parts) + store_flag(store)


def outcome_doc(outcome: RunOutcome, ceiling: float | None, resolved: Resolved, workflow: str | None,
                hints: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The `--json` document of a run or resume (`hints`: what each pending key takes, for its resolve line)."""
    store = resolved.engine.store_url
    error = error_view(outcome.error)
    hint = no_model_hint(resolved) if needs_a_model(outcome.error) else None
    return {
        "run_id": outcome.run_id,
        "status": outcome.status,
        "value": jsonable(outcome.value),
        "error": error.model_dump() if error else None,
        "hint": hint,
        "budget_usd": outcome.cost.ceiling_usd if outcome.cost.ceiling_usd is not None else ceiling,
        "cost": outcome.cost.model_dump(mode="json"),
        "usage": outcome.usage.model_dump(mode="json"),
        "replay": outcome.replay.model_dump(mode="json"),
        "dropped": [d.model_dump(mode="json") for d in outcome.dropped],
        "pending": list(outcome.pending),
        "resolve": resolve_commands(outcome, store, hints),
        "resume": resume_command(outcome, resolved, workflow, store) if outcome.pending else None,
        "warnings": list(outcome.warnings),
        "exit_code": STATUS_EXIT.get(outcome.status, 1),
    }


_COLOR = {"ok": "green", "suspended": "yellow", "exhausted": "yellow", "cancelled": "yellow"}


def print_outcome(outcome: RunOutcome, ceiling: float | None, resolved: Resolved, workflow: str | None,
                  json_out: bool, hints: Mapping[str, str] | None = None, source: str | None = None) -> int:
    """Print the outcome (human lines or `--json`) and return the exit code its status maps to (`source`: a
    fork's source run, named on its reuse line)."""
    doc = outcome_doc(outcome, ceiling, resolved, workflow, hints)
    if json_out:
        emit_json(doc)
        return int(doc["exit_code"])
    con = console()
    color = _COLOR.get(outcome.status, "red")
    con.print(f"run {esc(outcome.run_id)}: [{color}]{esc(outcome.status)}[/{color}]")
    if outcome.status in ("ok", "exhausted") or outcome.value is not None:
        con.print(f"  value    {esc(one_line(_dumps(doc['value'])))}")
    cost = outcome.cost
    con.print(f"  cost     {total_phrase(cost, ceiling)}, {plural(cost.provider_calls, 'provider call')}"
              + (" (approximate)" if cost.approximate else ""))
    orphaned = orphan_line(cost, outcome.run_id)
    if orphaned:
        con.print(f"  orphaned {esc(orphaned)}")
    reused = reused_line(cost, source)
    if reused:
        con.print(f"  reused   {esc(reused)}")
    for line in lost_lines(cost):
        con.print(f"  lost     {esc(line)}")
    r = outcome.replay
    con.print(f"  replay   {r.hits} hits, {r.misses} misses, {r.reruns} reruns, {r.skipped} skipped")
    error = doc["error"]
    if error is not None:
        con.print(f"  [red]error[/red]    ({esc(error['code'])}) {esc(one_line(error['message']))}")
    if doc["hint"]:
        con.print(f"  hint     {esc(doc['hint'])}")
    for dropped in outcome.dropped:
        message = (dropped.error or {}).get("message", "")
        con.print(f"  dropped  {esc(dropped.scope or '(root)')}: {esc(one_line(str(message)))}")
    for command in doc["resolve"]:
        con.print(f"  pending  {esc(command)}")
    if doc["resume"]:
        con.print(f"  then     {esc(doc['resume'])}")
    for warning in outcome.warnings:
        con.print(f"  [yellow]warning[/yellow]  {esc(one_line(warning))}")
    return int(doc["exit_code"])


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str)
