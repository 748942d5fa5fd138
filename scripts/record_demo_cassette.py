"""Record `src/tether/cli/demo_cassette.json`: the demo panel through the real Anthropic adapter.

The official SDK talks to a mock transport that answers each Messages API request with a
synthesized SSE stream of what `tether.cli.demo.stand_in` replies to it.
Usage: `python scripts/record_demo_cassette.py [OUT_PATH]`. The output is byte-for-byte reproducible.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

import anthropic
import httpx2

from tether.cli.demo import CASSETTE, QUESTION, REPLAY_BUDGET_USD, REPLAY_REF, panel, stand_in
from tether.engine.engine import Engine
from tether.engine.outcome import RunOutcome
from tether.models.anthropic_messages import AnthropicModel
from tether.testing import cassette
from tether.testing.wire import responder


async def _record_run(out: Path) -> RunOutcome:
    transport = httpx2.MockTransport(responder("anthropic", stand_in))
    client = anthropic.AsyncAnthropic(
        api_key="recording-offline", http_client=httpx2.AsyncClient(transport=transport), max_retries=0
    )
    recorder = cassette(AnthropicModel(client=client), out, mode="record")
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(models=[recorder], routing={"loop": REPLAY_REF}, store=f"sqlite:///{tmp}/record.db")
        try:
            return await engine.run(panel, {"question": QUESTION}, budget_usd=REPLAY_BUDGET_USD)
        finally:
            await engine.close()


def record(out: Path) -> int:
    """Run the panel once in record mode; write the cassette with its exchanges in key order."""
    out.unlink(missing_ok=True)
    outcome = asyncio.run(_record_run(out))
    if outcome.status != "ok":
        raise SystemExit(f"the demo run ended {outcome.status}: {outcome.error}")
    doc = json.loads(out.read_text(encoding="utf-8"))
    doc["exchanges"].sort(key=lambda e: e["key"])  # parallel branches record in any order
    out.write_text(json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    out.chmod(0o644)  # package data: readable by everyone (the cassette writes owner-only temp files)
    return len(doc["exchanges"])


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else CASSETTE
    count = record(target)
    print(f"recorded {count} exchanges to {target}")
