"""Scope paths: where in the call structure an effect happened (never when)."""

from __future__ import annotations


def join(parent: str, segment: str) -> str:
    """Append one segment to a scope path (`""` is the root body)."""
    return segment if not parent else f"{parent}/{segment}"


def parallel_segment(site: int, branch: int) -> str:
    return f"par:{site}:{branch}"


def child_segment(workflow: str, n: int) -> str:
    return f"wf:{workflow}:{n}"


def agent_segment(seq: int) -> str:
    return f"agent:{seq}"


def is_under(scope: str, ancestor: str) -> bool:
    """True when `scope` is `ancestor` or nested inside it."""
    return scope == ancestor or ancestor == "" or scope.startswith(ancestor + "/")
