"""Call identities: the content key of every kind of journaled call, in one place (SPEC §3, *Identity*).

A key is the sha256 of the RFC 8785 canonical JSON of a small identity object per kind. What goes into
each object is the whole contract of replay: change one and every journal written before misses. So
every recipe lives here, each beside the others, and nothing else in the engine builds one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.journal.canonical import content_key, step_key, to_jsonable

GENESIS_KEY = content_key({"kind": "decision", "decision": "genesis"})
"""The run's first decision: its workflow, args hash and the options fixed at its start."""
SETTLE_KEY = content_key({"kind": "decision", "decision": "settle"})
"""How a segment settled the run."""


def agent_identity(
    *, agent_type: str | None, model: Any, prompt: str, schema_hash: str | None, toolset_hash: str,
    isolation: str | None,
) -> dict[str, Any]:
    """An agent call's identity object (`prompt` is the call's `key=` when it gave one)."""
    return {"kind": "agent", "agent_type": agent_type, "model": model, "prompt": prompt,
            "schema_hash": schema_hash, "toolset_hash": toolset_hash, "isolation": isolation}


def agent_key(identity: dict[str, Any]) -> str:
    return content_key(identity)


def step_call_key(name: str, deps: Sequence[Any] = ()) -> str:
    """A host step's key: its label (or `key=`) and its declared deps."""
    if not deps:
        return step_key(name)  # the same bytes, written without walking a dict
    return content_key({"kind": "step", "key": name, "deps": to_jsonable(list(deps))})


def child_key(workflow: str, args: Any) -> str:
    """A child workflow's key: its name and its args (or the call's `key=`)."""
    return content_key({"kind": "child", "workflow": workflow, "args": to_jsonable(args, what="child args")})


def external_key(key: str) -> str:
    """An `await_external(key)` suspension's key."""
    return content_key({"kind": "external", "key": key})


def approval_key(tool: str, args: dict[str, Any]) -> str:
    """A tool approval's key: the tool and the arguments it asks to run with."""
    return content_key({"kind": "approval", "tool": tool, "input": to_jsonable(args)})


def rand_key(subtype: str, key: str | None) -> str:
    """`ctx.now()`, `ctx.random(key=)`, `ctx.uuid()`: the subtype, and the key when given."""
    identity: dict[str, Any] = {"kind": "rand", "subtype": subtype}
    if key is not None:
        identity["key"] = key
    return content_key(identity)


def decision_key(name: str) -> str:
    """An engine decision an agent journals (a failover, a tool grant, a finalization window)."""
    return content_key({"kind": "decision", "decision": name})


def budget_refusal_key(call: str) -> str:
    """The journaled admission refusal of agent call `call` (its content key)."""
    return content_key({"kind": "decision", "decision": "budget-refusal", "call": call})


def spawn_refusal_key(call: str) -> str:
    """The journaled containment refusal of agent call `call`."""
    return content_key({"kind": "tree", "refused": call})


def orchestrator_refusal_key(cap: str, n: int, goal: str) -> str:
    """An orchestrator's `n`-th spawn refused by `cap` (`max_spawns`, `usd`)."""
    return content_key({"kind": "tree", "refused": cap, "n": n, "goal": goal})


def args_hash(args: Any) -> str:
    """The hash of a run's args that its genesis and meta record (a resume with other args is refused)."""
    return content_key(args)
