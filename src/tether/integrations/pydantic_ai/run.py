"""`run(ctx, agent, prompt, ...)`: one pydantic-ai agent run as one durable, budgeted tether agent invocation."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import TypeAdapter
from pydantic_ai.agent import AbstractAgent, EventStreamHandler
from pydantic_ai.exceptions import UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, UserContent
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RunUsage, UsageLimits

from tether.contracts.errors import AgentCallError, BudgetExhaustedError, TetherError
from tether.contracts.results import AgentError, AgentResult, AgentStatus
from tether.contracts.stream import ErrorKind
from tether.integrations.pydantic_ai.model import TetherCapability, TetherModel
from tether.integrations.pydantic_ai.refs import tether_model
from tether.journal.canonical import content_key
from tether.loops import LoopSession, find_stop
from tether.routing import ModelLike
from tether.tools.definition import Tool

if TYPE_CHECKING:
    from tether import Ctx

DepsT = TypeVar("DepsT")
OutputT = TypeVar("OutputT")

ACTIVE_CTX: ContextVar[Ctx | None] = ContextVar("tether_pydantic_ai_ctx", default=None)
"""The tether run a bridged agent is running in, so a `durable(...)` sub-agent called from its tools joins it."""

_RUN_USAGE: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)

USAGE_ARTIFACT = "pydantic_ai_usage"
"""The terminal's record of the run's pydantic-ai `RunUsage` (requests, tool calls, tokens), for replays."""

@dataclass(frozen=True)
class RunResult(Generic[OutputT]):
    """What a bridged run gives back: `output` and `usage` as pydantic-ai's `AgentRunResult` has them, plus
    tether's `AgentResult` (status, cost, tokens, agent id; None when the agent ran outside tether)."""

    output: OutputT
    usage: RunUsage
    """pydantic-ai's usage of this run (requests, tool calls, tokens), the same live and on replay."""
    result: AgentResult[Any] | None = None

    @property
    def replayed(self) -> bool:
        """Served from the journal: no model request and no tool ran."""
        return self.result is not None and self.result.replayed

    @property
    def cost_usd(self) -> float:
        return self.result.cost_usd if self.result is not None else 0.0


async def run(
    ctx: Ctx,
    agent: AbstractAgent[DepsT, OutputT],
    user_prompt: str | Sequence[UserContent] | None = None,
    *,
    deps: DepsT = None,  # type: ignore[assignment]
    message_history: Sequence[ModelMessage] | None = None,
    model: ModelLike | None = None,
    model_settings: ModelSettings | None = None,
    usage_limits: UsageLimits | None = None,
    usage: RunUsage | None = None,
    event_stream_handler: EventStreamHandler[DepsT] | None = None,
    key: str | None = None,
    label: str | None = None,
    est_cost: float | None = None,
    max_turns: int | None = None,
    max_output_tokens: int | None = None,
) -> RunResult[OutputT]:
    """Run `agent` as one agent invocation of `ctx`'s run: durable, under the run's ceilings (docs/pydantic-ai.md).

    Args:
        ctx: The workflow's `tether.Ctx`.
        agent: The pydantic-ai agent, unchanged: its tools, output type, instructions, validators and
            capabilities all apply.
        user_prompt, deps, message_history, model_settings, usage_limits, usage, event_stream_handler: as for
            `agent.run(...)` (`model_settings["max_tokens"]` caps each request, the budget may clamp it lower; the
            handler sees each reply's events once it has settled, also when it is replayed).
        model: The tether model that serves (`"adapter:model"` or a `tether.ModelSpec` with fallbacks). Default:
            the agent's own model: an `AdapterModel`'s ref, else mapped to the tether adapter of the same provider
            (`"openai:gpt-4o"` -> `openai:gpt-4o`); with no model on the agent, the engine's `routing` for `loop`.
        key: Identity instead of the prompt (and history): the journal matches on it.
        label: A display name (events, `tether tree`); default the agent's name.
        est_cost: USD reserved at admission instead of the priced estimate of one turn.
        max_turns: Model requests allowed, then `UsageLimitExceeded` (None: pydantic-ai's `request_limit` governs).
        max_output_tokens: The output limit of each request (the budget may clamp it lower).

    Returns a `RunResult`; a completed run is served from the journal (zero model requests, zero tool calls).
    Raises `BudgetExhaustedError` when a ceiling stops it, pydantic-ai's `UsageLimitExceeded` when its usage
    limits do, and for other failures what the agent raised (`AgentCallError` when served from the journal).
    """
    name = agent.name or "agent"
    prompt = _prompt_text(user_prompt)
    if key is None and message_history:
        history = ModelMessagesTypeAdapter.dump_python(list(message_history), mode="json")
        key = content_key({"prompt": prompt, "history": history})
    bridge = _Bridge(ctx, agent, user_prompt, deps, message_history, model_settings, usage_limits, usage,
                     event_stream_handler)
    result = await ctx.agent(
        prompt, loop=bridge, full=True, max_turns=max_turns, model=model or tether_model(agent.model),
        agent_type=f"pydantic-ai:{name}", key=key, label=label or name, est_cost=est_cost,
        max_output_tokens=max_output_tokens, output=_identity_schema(agent.output_type), tools=identity_tools(agent),
    )
    return bridge.shape(result, label or name)


class _Bridge(Generic[DepsT, OutputT]):
    """The `tether.AgentLoop` of one pydantic-ai run: drives the agent on the session tether hands it; shapes
    what comes back."""

    def __init__(
        self, ctx: Ctx, agent: AbstractAgent[DepsT, OutputT], user_prompt: str | Sequence[UserContent] | None,
        deps: DepsT, history: Sequence[ModelMessage] | None, settings: ModelSettings | None,
        limits: UsageLimits | None, usage: RunUsage | None, handler: EventStreamHandler[DepsT] | None,
    ) -> None:
        self.ctx, self.agent, self.user_prompt, self.deps = ctx, agent, user_prompt, deps
        self.history, self.settings, self.limits, self.usage = history, settings, limits, usage
        self.handler = handler
        self.output: Any = None
        self.run_usage: RunUsage | None = None
        self.raised: BaseException | None = None

    async def run(self, session: LoopSession) -> AgentResult[Any]:
        model = TetherModel(session, session.model, session.caps)
        before = dataclasses.replace(self.usage) if self.usage is not None else RunUsage()
        token = ACTIVE_CTX.set(self.ctx)
        try:
            out = await self.agent.run(
                self.user_prompt, deps=self.deps, message_history=self.history, model=model,
                model_settings=self.settings, usage_limits=self.limits, usage=self.usage,
                event_stream_handler=self.handler, capabilities=[TetherCapability(session, model)], infer_name=False,
            )
        except Exception as exc:
            if find_stop(exc) is not None:
                raise  # tether stopped a turn (budget, cancellation, provider error): the session settles it
            status, error = _failure(exc)
            self.raised = exc
            return session.result(status, error=error)
        finally:
            ACTIVE_CTX.reset(token)
        self.output, self.run_usage = out.output, out.usage - before
        usage = _RUN_USAGE.dump_json(self.run_usage).decode()
        return session.result("ok", output=out.output, artifacts={USAGE_ARTIFACT: usage})

    def shape(self, result: AgentResult[Any], label: str) -> RunResult[OutputT]:
        if result.status == "ok":
            run_usage = self.run_usage if self.run_usage is not None else _journaled_usage(result)
            if result.replayed and self.usage is not None:
                self.usage.incr(run_usage)  # a delegating parent counts a replayed child as it counted it live
            output = self.output if not result.replayed else _revalidate(self.agent.output_type, result.output)
            return RunResult(output, run_usage, result)
        if self.raised is not None:
            raise self.raised  # live: what the agent raised (its terminal is journaled already)
        error = result.error or AgentError(kind="terminal", message=f"ended {result.status}")
        if result.status == "limit" and error.kind != "budget":
            raise UsageLimitExceeded(error.message)
        if error.kind == "schema-mismatch":
            raise UnexpectedModelBehavior(error.message)
        raise AgentCallError(
            f"pydantic-ai agent {label!r} ended {result.status} ({error.kind}): {error.message}",
            error=error, status=result.status, agent_id=result.agent_id,
        )


def _failure(exc: BaseException) -> tuple[AgentStatus, AgentError]:
    """How a run pydantic-ai ended with `exc` is journaled: usage limits and unusable replies replay (they
    follow from the journaled turns); a tool's own exception runs again on resume."""
    message = str(exc) or type(exc).__name__
    kind: ErrorKind = "tool"
    if isinstance(exc, UsageLimitExceeded):
        return "limit", AgentError(kind="terminal", message=message)
    if isinstance(exc, UnexpectedModelBehavior):
        kind = "schema-mismatch"
    elif isinstance(exc, BudgetExhaustedError):  # a sub-agent's ceiling, raised through a tool
        return "error", AgentError(kind="budget", message=message, stage="loop")
    elif isinstance(exc, TetherError):
        kind = "terminal"
    else:
        message = f"{type(exc).__name__}: {message}"
    return "error", AgentError(kind=kind, message=message)


def identity_tools(agent: AbstractAgent[Any, Any]) -> list[Tool]:
    """The agent's function tools as the journal identifies them (name, description, schema); tools a toolset
    only lists at run time (MCP servers, dynamic toolsets) are not part of the identity."""
    out: list[Tool] = []
    for toolset in agent.toolsets:
        tools = getattr(toolset, "tools", None)
        if not isinstance(tools, dict):
            continue
        for tool in tools.values():
            spec = getattr(tool, "tool_def", None)
            if spec is not None:
                out.append(Tool(spec.name, spec.description or "", spec.parameters_json_schema, _identity_only))
    return out


def _identity_only(**_: Any) -> Any:  # pragma: no cover - identity tools are never executed
    raise TetherError("a pydantic-ai tool runs through pydantic-ai, never through its identity record")


def _identity_schema(output_type: Any) -> dict[str, Any] | None:
    """The output type's JSON schema for the identity (None for text output)."""
    target = _plain_output(output_type)
    if target is str:
        return None
    try:
        schema: dict[str, Any] = TypeAdapter(target).json_schema()
        return schema
    except Exception:  # an output function or a union of markers: identified by its kind only
        return {"title": f"{type(output_type).__module__}.{type(output_type).__qualname__}"}


def _plain_output(output_type: Any) -> Any:
    """The type inside pydantic-ai's output markers (`ToolOutput(X)`, `NativeOutput(X)`, ...)."""
    for attr in ("output", "outputs"):
        inner = None if isinstance(output_type, type) else getattr(output_type, attr, None)
        if inner is not None:
            return _plain_output(inner)
    return output_type


def _revalidate(output_type: Any, value: Any) -> Any:
    """A replayed output (journaled as JSON) as the agent's output type, when pydantic can rebuild it."""
    try:
        return TypeAdapter(_plain_output(output_type)).validate_python(value)
    except Exception:
        return value


def _prompt_text(prompt: str | Sequence[UserContent] | None) -> str:
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(p if isinstance(p, str) else getattr(p, "content", "") or "" for p in prompt
                     if isinstance(p, str) or isinstance(getattr(p, "content", None), str))


def _journaled_usage(result: AgentResult[Any]) -> RunUsage:
    raw = result.artifacts.get(USAGE_ARTIFACT)
    if raw:
        return _RUN_USAGE.validate_json(raw)
    u = result.usage
    return RunUsage(requests=result.turns, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                    cache_read_tokens=u.cache_read_tokens, cache_write_tokens=u.cache_write_tokens)


__all__ = ["ACTIVE_CTX", "RunResult", "run"]
