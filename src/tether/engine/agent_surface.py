"""The typed `ctx.agent` and `ctx.orchestrate`: overloads that say what comes back, options in one place.

`await ctx.agent(p)` is a `str`, `await ctx.agent(p, output=Verdict)` a `Verdict`, `on_error="none"`
adds `None`, and `full=True` gives the whole `AgentResult[...]`. A JSON-schema `output=` is `Any`.
Every other option is a `tether.AgentOptions` key; both forward to `AgentCall`, which does the work.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Unpack, overload

from pydantic import BaseModel

from tether.contracts.results import AgentResult
from tether.engine.options import AgentOptions

if TYPE_CHECKING:
    from tether.engine.agent_call import AgentCall

OutT = TypeVar("OutT", bound=BaseModel)
Schema = Mapping[str, Any]
OnError = Literal["raise", "none"]
Raise = Literal["raise"]
Off = Literal[False]
On = Literal[True]


class AgentSurface:
    """The agent half of `Ctx` (`Ctx` inherits it); `_agents` runs the invocations of one segment."""

    _agents: AgentCall

    # -- ctx.agent -----------------------------------------------------------------------------
    @overload
    async def agent(self, prompt: str, *, output: None = None, on_error: Raise = "raise", full: Off = False,
                    **options: Unpack[AgentOptions]) -> str: ...
    @overload
    async def agent(self, prompt: str, *, output: None = None, on_error: Literal["none"], full: Off = False,
                    **options: Unpack[AgentOptions]) -> str | None: ...
    @overload
    async def agent(self, prompt: str, *, output: None = None, on_error: OnError = "raise", full: On,
                    **options: Unpack[AgentOptions]) -> AgentResult[str]: ...
    @overload
    async def agent(self, prompt: str, *, output: type[OutT], on_error: Raise = "raise", full: Off = False,
                    **options: Unpack[AgentOptions]) -> OutT: ...
    @overload
    async def agent(self, prompt: str, *, output: type[OutT], on_error: Literal["none"], full: Off = False,
                    **options: Unpack[AgentOptions]) -> OutT | None: ...
    @overload
    async def agent(self, prompt: str, *, output: type[OutT], on_error: OnError = "raise", full: On,
                    **options: Unpack[AgentOptions]) -> AgentResult[OutT]: ...
    @overload
    async def agent(self, prompt: str, *, output: Schema, on_error: OnError = "raise", full: On,
                    **options: Unpack[AgentOptions]) -> AgentResult[Any]: ...
    @overload
    async def agent(self, prompt: str, *, output: type[BaseModel] | Schema | None = None, on_error: OnError = "raise",
                    full: bool = False, **options: Unpack[AgentOptions]) -> Any: ...

    def agent(
        self, prompt: str, *, output: type[BaseModel] | Schema | None = None, on_error: OnError = "raise",
        full: bool = False, **options: Unpack[AgentOptions],
    ) -> Coroutine[Any, Any, Any]:
        """One agent invocation: a journaled, budgeted tool loop (see docs/agents.md).

        Args:
            prompt: The task, sent as the first user message; part of the agent's identity (unless `key`).
            output: A pydantic model class or a JSON-schema dict: the reply is validated into it (re-prompted
                twice on issues, then `schema-mismatch`). None: the output is the reply's text.
            on_error: `"raise"` raises `AgentCallError` for a failed agent; `"none"` returns None and records
                it in `outcome.dropped`. A budget refusal raises `BudgetExhaustedError` either way.
            full: Return the whole `AgentResult` (status, usage, cost, error, ...) instead of the output.
            **options: `tether.AgentOptions`: `tools`, `model`, `agent_type`, `key`, `label`, `est_cost`,
                `max_turns`, `max_output_tokens`, `tool_budget`, `system`, `exposure_wait`, `isolation`, `repo`.
        """
        return self._agents.call(prompt, output=output, on_error=on_error, full=full, **options)

    # -- ctx.orchestrate -------------------------------------------------------------------------
    @overload
    async def orchestrate(self, goal: str, *, output: None = None, max_spawns: int | None = None,
                          on_error: Raise = "raise", full: Off = False, **options: Unpack[AgentOptions]) -> str: ...
    @overload
    async def orchestrate(self, goal: str, *, output: type[OutT], max_spawns: int | None = None,
                          on_error: Raise = "raise", full: Off = False, **options: Unpack[AgentOptions]) -> OutT: ...
    @overload
    async def orchestrate(self, goal: str, *, output: None = None, max_spawns: int | None = None,
                          on_error: OnError = "raise", full: On,
                          **options: Unpack[AgentOptions]) -> AgentResult[str]: ...
    @overload
    async def orchestrate(self, goal: str, *, output: type[OutT], max_spawns: int | None = None,
                          on_error: OnError = "raise", full: On,
                          **options: Unpack[AgentOptions]) -> AgentResult[OutT]: ...
    @overload
    async def orchestrate(self, goal: str, *, output: type[BaseModel] | Schema | None = None,
                          max_spawns: int | None = None, on_error: OnError = "raise", full: bool = False,
                          **options: Unpack[AgentOptions]) -> Any: ...

    async def orchestrate(
        self, goal: str, *, output: type[BaseModel] | Schema | None = None, max_spawns: int | None = None,
        on_error: OnError = "raise", full: bool = False, **options: Unpack[AgentOptions],
    ) -> Any:
        """A dynamic orchestrator agent with a `spawn_agent` tool (see docs/agent-trees.md); `max_spawns`
        caps its spawns, the rest are `ctx.agent`'s."""
        return await self._agents.orchestrate(
            goal, output=output, max_spawns=max_spawns, on_error=on_error, full=full, **options
        )
