"""`durable(agent)`: a pydantic-ai agent whose `run(...)` is durable inside a tether run and plain outside one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from pydantic_ai.agent import AbstractAgent, EventStreamHandler
from pydantic_ai.messages import ModelMessage, UserContent
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RunUsage, UsageLimits

from tether.contracts.errors import ConfigError
from tether.integrations.pydantic_ai.run import ACTIVE_CTX, RunResult, run
from tether.loops import in_workflow
from tether.routing import ModelLike

if TYPE_CHECKING:
    from tether import Ctx

DepsT = TypeVar("DepsT")
OutputT = TypeVar("OutputT")


class DurableAgent(Generic[DepsT, OutputT]):
    """A pydantic-ai agent bound to tether's options; `run(...)` takes pydantic-ai's arguments plus `ctx`.

    Inside a tether run `run` is `tether.integrations.pydantic_ai.run(ctx, agent, ...)`: `ctx` is the one passed,
    or, in a tool of a bridged agent (a sub-agent), the run that agent belongs to. Outside any tether run it is
    the agent's own `run`, on its own model, wrapped in the same `RunResult` (`result` is None).
    """

    def __init__(
        self, agent: AbstractAgent[DepsT, OutputT], *, model: ModelLike | None = None, label: str | None = None,
        est_cost: float | None = None, max_turns: int | None = None, max_output_tokens: int | None = None,
    ) -> None:
        self.agent = agent
        self.model, self.label, self.est_cost = model, label, est_cost
        self.max_turns, self.max_output_tokens = max_turns, max_output_tokens

    @property
    def name(self) -> str | None:
        return self.agent.name

    async def run(
        self,
        user_prompt: str | Sequence[UserContent] | None = None,
        *,
        ctx: Ctx | None = None,
        deps: DepsT = None,  # type: ignore[assignment]
        message_history: Sequence[ModelMessage] | None = None,
        model_settings: ModelSettings | None = None,
        usage_limits: UsageLimits | None = None,
        usage: RunUsage | None = None,
        event_stream_handler: EventStreamHandler[DepsT] | None = None,
        key: str | None = None,
        label: str | None = None,
        est_cost: float | None = None,
    ) -> RunResult[OutputT]:
        ctx = ctx if ctx is not None else ACTIVE_CTX.get()
        if ctx is not None:
            return await run(
                ctx, self.agent, user_prompt, deps=deps, message_history=message_history, model=self.model,
                model_settings=model_settings, usage_limits=usage_limits, usage=usage,
                event_stream_handler=event_stream_handler, key=key,
                label=label or self.label, est_cost=est_cost if est_cost is not None else self.est_cost,
                max_turns=self.max_turns, max_output_tokens=self.max_output_tokens,
            )
        if in_workflow():
            raise ConfigError(
                f"durable agent {self.agent.name or 'agent'!r} runs inside a tether workflow without ctx: pass "
                "ctx=ctx to run(...) so its requests go through the run's journal and budget.",
            )
        out = await self.agent.run(user_prompt, deps=deps, message_history=message_history,
                                   model_settings=model_settings, usage_limits=usage_limits, usage=usage,
                                   event_stream_handler=event_stream_handler)
        return RunResult(out.output, out.usage, None)


def durable(
    agent: AbstractAgent[DepsT, OutputT], *, model: ModelLike | None = None, label: str | None = None,
    est_cost: float | None = None, max_turns: int | None = None, max_output_tokens: int | None = None,
) -> DurableAgent[DepsT, OutputT]:
    """`agent` with tether's options bound (see `DurableAgent`); the agent itself is not changed."""
    return DurableAgent(agent, model=model, label=label, est_cost=est_cost, max_turns=max_turns,
                        max_output_tokens=max_output_tokens)


__all__ = ["DurableAgent", "durable"]
