"""The pydantic-ai side of one durable run: a `Model` whose requests are tether turns, and a capability that
sends every tool execution through tether's journal and effect ledger.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic_ai import ModelRetry
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import SkipToolExecution, ToolFailed, ToolFailedError, ToolRetryError
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext, ToolDefinition

from tether.contracts.errors import ConfigError
from tether.contracts.messages import ToolSpec
from tether.contracts.stream import ModelCaps
from tether.integrations.pydantic_ai.messages import to_history, to_response
from tether.journal.canonical import to_jsonable
from tether.loops import LoopSession, OutputSpec, RecordedTool

IDEMPOTENCY_KEY: ContextVar[str | None] = ContextVar("tether_pydantic_ai_idempotency_key", default=None)
"""The effect ledger's key of the tool call running in this task (values are per task, never shared)."""


class TetherModel(FunctionModel):
    """A pydantic-ai model whose every request is one turn of a tether agent invocation.

    Built per run by the bridge: `ref` is the tether model that serves (`adapter:model`), `caps` its
    capabilities (native structured output only where tether's adapter has it).
    """

    def __init__(self, session: LoopSession, ref: str, caps: ModelCaps) -> None:
        self._session = session
        profile = ModelProfile(
            supports_tools=True, supports_json_schema_output=caps.structured_output == "native",
            supports_json_object_output=False, default_structured_output_mode="tool",
        )
        super().__init__(self._answer, model_name=ref, profile=profile)
        self._system = "tether"

    async def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        system, history = to_history(messages)
        if info.instructions:
            system.append(info.instructions)
        defs = [*info.function_tools, *info.output_tools]
        tools = [ToolSpec(name=t.name, description=t.description or "", parameters=t.parameters_json_schema)
                 for t in defs]
        params = info.model_request_parameters
        if params.native_tools:
            names = ", ".join(sorted(type(t).__name__ for t in params.native_tools))
            raise ConfigError(
                f"this agent asks for provider-native tools ({names}); tether's adapters send none, so under "
                "tether give the agent function tools (or an MCP toolset) instead.",
                tools=names,
            )
        output = None
        if params.output_mode == "native" and params.output_object is not None:
            target = params.output_object
            output = OutputSpec(schema=target.json_schema, name=target.name or "result")
        settings = info.model_settings or {}
        max_tokens = settings.get("max_tokens")
        turn = await self._session.model_turn(
            history, system="\n\n".join(system) or None, tools=tools, output=output,
            tool_choice="required" if tools and not info.allow_text_output else "auto",
            max_output_tokens=int(max_tokens) if max_tokens is not None else None,
        )
        return to_response(turn, self.model_name)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        # The turn streams inside tether (meter, stream cut); pydantic-ai's stream replays the settled reply.
        response = await self.request(messages, model_settings, model_request_parameters)
        yield CompletedStreamedResponse(response, model_request_parameters=model_request_parameters,
                                        replay_events=True)


@dataclass
class TetherCapability(AbstractCapability[Any]):
    """Per run: keeps every request on the tether model and every tool execution on the journal."""

    session: LoopSession
    model: TetherModel

    def get_wrapper_model(self, model: Model) -> Model | None:
        inner = model
        while isinstance(inner, WrapperModel):
            inner = inner.wrapped
        if inner is self.model:
            return None
        raise ConfigError(
            f"a capability moved this pydantic-ai run to the model {model.model_name!r}; under tether every request "
            f"goes through the tether model {self.model.model_name!r} (its budget and journal). Pick the model with "
            "model= (fallbacks as a tether.ModelSpec), not with a capability.",
            model=model.model_name,
        )

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: Callable[[Any], Awaitable[Any]],
    ) -> Any:
        return await execute_tool(self.session, call, tool_def, lambda: handler(args))


async def execute_tool(
    session: LoopSession, call: ToolCallPart, tool_def: ToolDefinition, handler: Callable[[], Awaitable[Any]]
) -> Any:
    """One tool execution: its journaled result on resume, else run once through the effect ledger."""
    recorded = session.recorded_tool(call.tool_call_id)
    if recorded is not None:
        replay(recorded)
    idempotent = bool((tool_def.metadata or {}).get("idempotent"))

    async def perform(key: str) -> Any:
        token = IDEMPOTENCY_KEY.set(key)
        try:
            return await handler()
        finally:
            IDEMPOTENCY_KEY.reset(token)

    name = call.tool_name
    try:
        value = await session.run_tool(call.tool_call_id, name, call.args_as_dict(), perform, idempotent=idempotent)
    except ToolRetryError as exc:
        await session.record_tool(call.tool_call_id, name, RecordedTool("retry", message=_text(exc.tool_retry.content)))
        raise
    except ToolFailedError as exc:
        failed = RecordedTool("failed", message=_text(exc.tool_failed.content))
        await session.record_tool(call.tool_call_id, name, failed)
        raise
    if isinstance(value, RecordedTool):  # an interrupted call of a tool that is not idempotent: not run again
        await session.record_tool(call.tool_call_id, name, value)
        raise SkipToolExecution(value.message)
    await session.record_tool(call.tool_call_id, name, RecordedTool("value", value=to_jsonable(
        value, what=f"the result of tool {name!r}")))
    return value


def replay(recorded: RecordedTool) -> None:
    """Hand pydantic-ai a journaled result as its tool would have: a value, a retry, a failure."""
    if recorded.kind == "retry":
        raise ModelRetry(recorded.message)
    if recorded.kind == "failed":
        raise ToolFailed(recorded.message)
    raise SkipToolExecution(recorded.value if recorded.kind == "value" else recorded.message)


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(to_jsonable(content), separators=(",", ":"))
