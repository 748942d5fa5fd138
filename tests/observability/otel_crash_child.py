"""A segment that exports spans over OTLP/HTTP, then waits to be SIGKILLed (or, resumed, runs to the end).

argv: DIR (its sqlite store) RUN_ID PROCESSOR(batch|crash-safe) OTLP_URL MARKER [resume]
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from obskit import engine_for, lookup
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import tether
from tether.observability.otel import crash_safe_processor

workdir, run_id, processor, url, marker = sys.argv[1:6]
resuming = sys.argv[6:] == ["resume"]
exporter = OTLPSpanExporter(endpoint=url)
provider = TracerProvider()
made_at = time.time()
provider.add_span_processor(crash_safe_processor(exporter) if processor == "crash-safe" else BatchSpanProcessor(exporter))


def _mark() -> None:
    """Tell the test the hold began (written whole: it reads the file as soon as it exists)."""
    Path(marker + ".tmp").write_text(json.dumps({"processor_made_at": made_at, "at": time.time()}))
    Path(marker + ".tmp").replace(marker)


@tether.workflow(name="crashy")
async def crashy(ctx: tether.Ctx) -> list[Any]:
    first = await ctx.agent("research tides", tools=[lookup], label="researcher")

    async def hold() -> str:
        if not resuming:
            await asyncio.sleep(0.5)  # the researcher's spans ended half a second ago
            _mark()
            await asyncio.sleep(60)  # SIGKILLed here
        return "held"

    await ctx.step("hold", hold)
    return [first, await ctx.agent("summarize", label="writer")]


async def main() -> None:
    engine, _ = engine_for(Path(workdir), tracer_provider=provider)
    outcome = await (engine.resume(run_id, crashy) if resuming else engine.run(crashy, run_id=run_id))
    await engine.close()
    provider.shutdown()
    print(outcome.status)


asyncio.run(main())
