"""The typed `ctx.agent` and `ctx.orchestrate`: explicit options and overloads that say what comes back.

`await ctx.agent(p)` is a `str`, `await ctx.agent(p, output=Verdict)` a `Verdict`, `on_error="none"`
adds `None`, and `full=True` gives the whole `AgentResult[...]`. A JSON-schema `output=` is `Any`.
Both forward every option to `AgentCall`, which does the work.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from pydantic import BaseModel

from tether.agents.tool_budget import ToolBudget
from tether.contracts.results import AgentResult
from tether.routing import ModelLike
from tether.tools.definition import Tool

if TYPE_CHECKING:
    from tether.engine.agent_call import AgentCall

OutT = TypeVar("OutT", bound=BaseModel)
Schema = Mapping[str, Any]
OnError = Literal["raise", "none"]
Isolation = Literal["worktree"] | None


class AgentSurface:
    """The agent half of `Ctx` (`Ctx` inherits it); `_agents` runs the invocations of one segment."""

    _agents: AgentCall

    # -- ctx.agent -----------------------------------------------------------------------------
    @overload
    async def agent(
        self, prompt: str, *, output: None = None, tools: Sequence[Tool] = (), model: ModelLike | None = None,
        agent_type: str | None = None, key: str | None = None, label: str | None = None,
        est_cost: float | None = None, max_turns: int | None = None, max_output_tokens: int | None = None,
        tool_budget: ToolBudget | None = None, on_error: Literal["raise"] = "raise", full: Literal[False] = False,
        system: str | None = None, exposure_wait: bool = False, isolation: Isolation = None, repo: str | None = None,
    ) -> str: ...
    @overload
    async def agent(
        self, prompt: str, *, output: None = None, tools: Sequence[Tool] = (), model: ModelLike | None = None,
        agent_type: str | None = None, key: str | None = None, label: str | None = None,
        est_cost: float | None = None, max_turns: int | None = None, max_output_tokens: int | None = None,
        tool_budget: ToolBudget | None = None, on_error: Literal["none"], full: Literal[False] = False,
        system: str | None = None, exposure_wait: bool = False, isolation: Isolation = None, repo: str | None = None,
    ) -> str | None: ...
    @overload
    async def agent(
        self, prompt: str, *, output: None = None, tools: Sequence[Tool] = (), model: ModelLike | None = None,
        agent_type: str | None = None, key: str | None = None, label: str | None = None,
        est_cost: float | None = None, max_turns: int | None = None, max_output_tokens: int | None = None,
        tool_budget: ToolBudget | None = None, on_error: OnError = "raise", full: Literal[True],
        system: str | None = None, exposure_wait: bool = False, isolation: Isolation = None, repo: str | None = None,
    ) -> AgentResult[str]: ...
    @overload
    async def agent(
        self, prompt: str, *, output: type[OutT], tools: Sequence[Tool] = (), model: ModelLike | None = None,
        agent_type: str | None = None, key: str | None = None, label: str | None = None,
        est_cost: float | None = None, max_turns: int | None = None, max_output_tokens: int | None = None,
        tool_budget: ToolBudget | None = None, on_error: Literal["raise"] = "raise", full: Literal[False] = False,
        system: str | None = None, exposure_wait: bool = False, isolation: Isolation = None, repo: str | None = None,
    ) -> OutT: ...
    @overload
    async def agent(
        self, prompt: str, *, output: type[OutT], tools: Sequence[Tool] = (), model: ModelLike | None = None,
        agent_type: str | None = None, key: str | None = None, label: str | None = None,
        est_cost: float | None = None, max_turns: int | None = None, max_output_tokens: int | None = None,
        tool_budget: ToolBudget | None = None, on_error: Literal["none"], full: Literal[False] = False,
        system: str | None = None, exposure_wait: bool = False, isolation: Isolation = None, repo: str | None = None,
    ) -> OutT | None: ...
    @overload
    async def agent(
        self, prompt: str, *, output: type[OutT], tools: Sequence[Tool] = (), model: ModelLike | None = None,
        agent_type: str | None = None, key: str | None = None, label: str | None = None,
        est_cost: float | None = None, max_turns: int | None = None, max_output_tokens: int | None = None,
        tool_budget: ToolBudget | None = None, on_error: OnError = "raise", full: Literal[True],
        system: str | None = None, exposure_wait: bool = False, isolation: Isolation = None, repo: str | None = None,
    ) -> AgentResult[OutT]: ...
    @overload
    async def agent(
        self, prompt: str, *, output: Schema, tools: Sequence[Tool] = (), model: ModelLike | None = None,
        agent_type: str | None = None, key: str | None = None, label: str | None = None,
        est_cost: float | None = None, max_turns: int | None = None, max_output_tokens: int | None = None,
        tool_budget: ToolBudget | None = None, on_error: OnError = "raise", full: Literal[True],
        system: str | None = None, exposure_wait: bool = False, isolation: Isolation = None, repo: str | None = None,
    ) -> AgentResult[Any]: ...
    @overload
    async def agent(
        self, prompt: str, *, output: type[BaseModel] | Schema | None = None, tools: Sequence[Tool] = (),
        model: ModelLike | None = None, agent_type: str | None = None, key: str | None = None,
        label: str | None = None, est_cost: float | None = None, max_turns: int | None = None,
        max_output_tokens: int | None = None, tool_budget: ToolBudget | None = None, on_error: OnError = "raise",
        full: bool = False, system: str | None = None, exposure_wait: bool = False, isolation: Isolation = None,
        repo: str | None = None,
    ) -> Any: ...

    def agent(
        self, prompt: str, *, output: type[BaseModel] | Schema | None = None, tools: Sequence[Tool] = (),
        model: ModelLike | None = None, agent_type: str | None = None, key: str | None = None,
        label: str | None = None, est_cost: float | None = None, max_turns: int | None = None,
        max_output_tokens: int | None = None, tool_budget: ToolBudget | None = None, on_error: OnError = "raise",
        full: bool = False, system: str | None = None, exposure_wait: bool = False, isolation: Isolation = None,
        repo: str | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """One agent invocation: a journaled, budgeted tool loop (see docs/agents.md).

        Args:
            prompt: The task, sent as the first user message; part of the agent's identity (unless `key`).
            output: A pydantic model class or a JSON-schema dict: the reply is validated into it (re-prompted
                twice on issues, then `schema-mismatch`). None: the output is the reply's text.
            tools: `tether.Tool`s (`@tether.tool`, docs/tools.md) and MCP sources the model may call.
            model: `"adapter:model"`, a list (the rest are fallbacks) or a `tether.ModelSpec`; default: the
                profile's, else the workflow's, else the engine's `routing` for the `loop` role.
            agent_type: A profile registered with `engine.profile(...)`: its model, tools, system prompt and
                limits are the defaults here; grouped under it in `by_agent_type` costs.
            key: Identity instead of the prompt: the journal matches on it, so the prompt may change freely.
            label: A display name (events, spans, `tether tree`); never part of the identity.
            est_cost: USD reserved at admission instead of the priced estimate of one turn.
            max_turns: Model calls allowed (default 32, or the profile's); past it the agent settles `limit`.
            max_output_tokens: The output limit of each call (the budget may clamp it lower).
            tool_budget: A `tether.ToolBudget` capping this invocation's tool calls (docs/tool-budgets.md).
            on_error: `"raise"` raises `AgentCallError` for a failed agent; `"none"` returns None and records
                it in `outcome.dropped`. A budget refusal raises `BudgetExhaustedError` either way.
            full: Return the whole `AgentResult` (status, usage, cost, error, ...) instead of the output.
            system: The system prompt (default: the profile's).
            exposure_wait: Under `max_in_flight_exposure_usd`, wait for in-flight calls to settle instead of
                failing when the exposure cap is full.
            isolation: `"worktree"`: every tool call runs in a disposable git worktree of `repo`; the patch
                comes back in `AgentResult.artifacts["patch"]`. Part of the identity.
            repo: The repository for `isolation="worktree"` (default: the working directory).

        It hands back `AgentCall.call`'s coroutine rather than awaiting it in a frame of its own: the
        same awaitable, one frame fewer per agent in flight (10,000 agents in flight, 6 MB less).
        """
        return self._agents.call(
            prompt, output=output, tools=tools, model=model, agent_type=agent_type, key=key, label=label,
            est_cost=est_cost, max_turns=max_turns, max_output_tokens=max_output_tokens, tool_budget=tool_budget,
            on_error=on_error, full=full, system=system, exposure_wait=exposure_wait, isolation=isolation, repo=repo,
        )

    # -- ctx.orchestrate -------------------------------------------------------------------------
    @overload
    async def orchestrate(
        self, goal: str, *, tools: Sequence[Tool] = (), output: None = None, max_spawns: int | None = None,
        model: ModelLike | None = None, agent_type: str | None = None, key: str | None = None,
        label: str | None = None, est_cost: float | None = None, max_turns: int | None = None,
        max_output_tokens: int | None = None, tool_budget: ToolBudget | None = None,
        on_error: Literal["raise"] = "raise", full: Literal[False] = False, system: str | None = None,
        exposure_wait: bool = False,
    ) -> str: ...
    @overload
    async def orchestrate(
        self, goal: str, *, tools: Sequence[Tool] = (), output: type[OutT], max_spawns: int | None = None,
        model: ModelLike | None = None, agent_type: str | None = None, key: str | None = None,
        label: str | None = None, est_cost: float | None = None, max_turns: int | None = None,
        max_output_tokens: int | None = None, tool_budget: ToolBudget | None = None,
        on_error: Literal["raise"] = "raise", full: Literal[False] = False, system: str | None = None,
        exposure_wait: bool = False,
    ) -> OutT: ...
    @overload
    async def orchestrate(
        self, goal: str, *, tools: Sequence[Tool] = (), output: None = None, max_spawns: int | None = None,
        model: ModelLike | None = None, agent_type: str | None = None, key: str | None = None,
        label: str | None = None, est_cost: float | None = None, max_turns: int | None = None,
        max_output_tokens: int | None = None, tool_budget: ToolBudget | None = None, on_error: OnError = "raise",
        full: Literal[True], system: str | None = None, exposure_wait: bool = False,
    ) -> AgentResult[str]: ...
    @overload
    async def orchestrate(
        self, goal: str, *, tools: Sequence[Tool] = (), output: type[OutT], max_spawns: int | None = None,
        model: ModelLike | None = None, agent_type: str | None = None, key: str | None = None,
        label: str | None = None, est_cost: float | None = None, max_turns: int | None = None,
        max_output_tokens: int | None = None, tool_budget: ToolBudget | None = None, on_error: OnError = "raise",
        full: Literal[True], system: str | None = None, exposure_wait: bool = False,
    ) -> AgentResult[OutT]: ...
    @overload
    async def orchestrate(
        self, goal: str, *, tools: Sequence[Tool] = (), output: type[BaseModel] | Schema | None = None,
        max_spawns: int | None = None, model: ModelLike | None = None, agent_type: str | None = None,
        key: str | None = None, label: str | None = None, est_cost: float | None = None,
        max_turns: int | None = None, max_output_tokens: int | None = None, tool_budget: ToolBudget | None = None,
        on_error: OnError = "raise", full: bool = False, system: str | None = None, exposure_wait: bool = False,
    ) -> Any: ...

    async def orchestrate(
        self, goal: str, *, tools: Sequence[Tool] = (), output: type[BaseModel] | Schema | None = None,
        max_spawns: int | None = None, model: ModelLike | None = None, agent_type: str | None = None,
        key: str | None = None, label: str | None = None, est_cost: float | None = None,
        max_turns: int | None = None, max_output_tokens: int | None = None, tool_budget: ToolBudget | None = None,
        on_error: OnError = "raise", full: bool = False, system: str | None = None, exposure_wait: bool = False,
    ) -> Any:
        """A dynamic orchestrator agent with a `spawn_agent` tool (see docs/agent-trees.md)."""
        return await self._agents.orchestrate(
            goal, tools=tools, output=output, max_spawns=max_spawns, model=model, agent_type=agent_type, key=key,
            label=label, est_cost=est_cost, max_turns=max_turns, max_output_tokens=max_output_tokens,
            tool_budget=tool_budget, on_error=on_error, full=full, system=system, exposure_wait=exposure_wait,
        )
