"""The permission chain: per tool call, does it run, is it refused, or does a human decide."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal, NamedTuple

from tether.tools.definition import Tool

Decision = Literal["allow", "deny", "ask"]
PermissionHook = Callable[[str, dict[str, Any]], Decision | None]
"""`(tool_name, args) -> "allow" | "deny" | "ask" | None`; None passes to the next link."""
CanUseTool = Callable[[str, dict[str, Any]], bool | Literal["ask"]]


class Verdict(NamedTuple):
    """What the chain decided and which link decided it (for the tool result and telemetry)."""

    decision: Decision
    reason: str


@dataclass(frozen=True, slots=True)
class Permissions:
    """Hooks → deny globs → ask globs → `can_use_tool` → default (ask when `needs_approval`).

    Globs are `fnmatch` patterns over tool names (`"fs_*"`); the first link that answers wins.
    """

    hooks: Sequence[PermissionHook] = ()
    deny: Sequence[str] = ()
    ask: Sequence[str] = ()
    can_use_tool: CanUseTool | None = None

    def decide(self, tool: Tool, args: dict[str, Any]) -> Verdict:
        for index, hook in enumerate(self.hooks):
            answer = hook(tool.name, args)
            if answer is not None:
                return Verdict(answer, f"permission hook #{index} answered {answer!r}")
        for pattern in self.deny:
            if fnmatchcase(tool.name, pattern):
                return Verdict("deny", f"deny rule {pattern!r}")
        for pattern in self.ask:
            if fnmatchcase(tool.name, pattern):
                return Verdict("ask", f"ask rule {pattern!r}")
        if self.can_use_tool is not None:
            verdict = self.can_use_tool(tool.name, args)
            if verdict == "ask":
                return Verdict("ask", "can_use_tool asked for approval")
            return Verdict(
                "allow" if verdict is True else "deny", f"can_use_tool returned {verdict}"
            )
        if tool.needs_approval:
            return Verdict("ask", f"tool {tool.name!r} needs approval")
        return Verdict("allow", "default")
