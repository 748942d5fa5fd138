"""Run an existing `pydantic_ai.Agent` inside a tether workflow, durably and under the run's ceilings.

    from tether.integrations import pydantic_ai as tpai

    @tether.workflow
    async def support(ctx: tether.Ctx, question: str) -> dict:
        answer = await tpai.run(ctx, support_agent, question, deps=deps, model="anthropic:claude-sonnet-4-5")
        return answer.output.model_dump()

Every model request of the agent is a tether turn (admission, the output clamp, the live meter and stream cut,
exposure; replayed from the journal on resume, never paid twice); every tool execution goes through the effect
ledger. `durable(agent)` binds the options once and makes sub-agents called from tools join the run. The long
form is docs/pydantic-ai.md. Needs the `pydantic-ai` extra (`pip install 'tether[pydantic-ai]'`).
"""

from __future__ import annotations

import importlib.util

from tether.contracts.errors import ConfigError

if importlib.util.find_spec("pydantic_ai") is None:
    raise ConfigError(
        "tether.integrations.pydantic_ai needs the 'pydantic-ai-slim' package, which is not installed: "
        "pip install 'tether[pydantic-ai]'",
        extra="pydantic-ai", package="pydantic-ai-slim", pip="pip install 'tether[pydantic-ai]'",
    )

from tether.integrations.pydantic_ai.durable import DurableAgent, durable
from tether.integrations.pydantic_ai.model import IDEMPOTENCY_KEY, TetherModel
from tether.integrations.pydantic_ai.refs import AdapterModel, tether_model
from tether.integrations.pydantic_ai.run import RunResult, run


def idempotency_key() -> str | None:
    """Inside a tool of a bridged agent: the effect ledger's key of this call (the same on every resume)."""
    return IDEMPOTENCY_KEY.get()


__all__ = [
    "AdapterModel", "DurableAgent", "RunResult", "TetherModel", "durable", "idempotency_key", "run", "tether_model",
]
