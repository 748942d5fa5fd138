"""The pydantic-ai model prefixes the bridge lists are the ones the installed pydantic-ai accepts (issue 42).

pydantic-ai 2 dropped `google-gla:` / `google-vertex:` for `google:` / `google-cloud:`. Each prefix in the
bridge's table (and in docs/pydantic-ai.md, which must say the same) is one pydantic-ai resolves, and an agent
whose model string has it is served by the tether adapter the table names.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import UserError
from pydantic_ai.providers import infer_provider_class

import tether
from tether.integrations import pydantic_ai as tpai
from tether.integrations.pydantic_ai.refs import PROVIDER_ADAPTERS
from tether.testing import Reply

DOCS = Path(__file__).resolve().parents[2] / "docs" / "pydantic-ai.md"
DROPPED = ("google-gla", "google-vertex", "gemini")
"""Prefixes of pydantic-ai 1 (and a guess users make) that pydantic-ai 2 no longer knows."""
# What pydantic-ai's providers read when an Agent builds one from a string (no request is ever sent).
PROVIDER_ENV = {
    "OPENAI_API_KEY": "sk-prefix-test", "ANTHROPIC_API_KEY": "sk-ant-prefix-test", "GOOGLE_API_KEY": "g-prefix-test",
    "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",  # botocore reads the second
}


def documented() -> dict[str, str]:
    """The prefix table of docs/pydantic-ai.md: each `prefix:` of a row and the adapter id the row names."""
    table = DOCS.read_text().split("<!-- prefix-table -->")[1].split("<!-- /prefix-table -->")[0]
    rows: dict[str, str] = {}
    for line in table.strip().splitlines()[2:]:  # past the header and its rule
        _, prefixes, adapter, _ = line.split("|")
        found = re.match(r"\s*`([a-z_]+)`", adapter)
        assert found, line
        rows.update(dict.fromkeys(re.findall(r"`([a-z-]+):`", prefixes), found.group(1)))
    return rows


def pydantic_ai_knows(prefix: str) -> bool:
    """pydantic-ai has a provider of this name (its SDK may still be missing: `bedrock` needs boto3)."""
    try:
        infer_provider_class(prefix)
    except ValueError:
        return False
    except ImportError:  # a provider it knows, whose optional SDK is not installed
        return True
    return True


def test_the_docs_list_exactly_the_bridges_prefixes() -> None:
    assert documented() == PROVIDER_ADAPTERS


@pytest.mark.parametrize("prefix", sorted(PROVIDER_ADAPTERS))
def test_each_listed_prefix_is_one_pydantic_ai_resolves(prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert pydantic_ai_knows(prefix)
    for name, value in PROVIDER_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)  # google-cloud: an express key, no ADC
    try:
        agent = Agent(f"{prefix}:m1")  # built at once, as at import
    except ImportError as missing:  # only a provider whose SDK tether does not use
        assert prefix == "bedrock" and "boto3" in str(missing)
        return
    assert tpai.tether_model(agent.model) == f"{PROVIDER_ADAPTERS[prefix]}:m1"  # the Model object, by its system


@pytest.mark.parametrize("prefix", DROPPED)
def test_a_dropped_prefix_is_unknown_to_pydantic_ai_and_not_listed(prefix: str) -> None:
    assert not pydantic_ai_knows(prefix)
    with pytest.raises(UserError, match="Unknown model"):
        Agent(f"{prefix}:m1")
    assert prefix not in PROVIDER_ADAPTERS
    assert f"`{prefix}:`" not in DOCS.read_text().split("<!-- prefix-table -->")[1].split("<!-- /prefix-table -->")[0]


@pytest.mark.parametrize("prefix", sorted(PROVIDER_ADAPTERS))
async def test_an_agent_with_a_listed_prefix_is_served_by_the_adapter_the_table_names(
    prefix: str, tmp_path: Path
) -> None:
    adapter = PROVIDER_ADAPTERS[prefix]
    model = tether.models.fake(adapter, script=[Reply(text="served")], prices={"m1": tether.Price(input=1, output=1)})
    agent = Agent(f"{prefix}:m1", defer_model_check=True)  # no provider built: this test reads no environment

    @tether.workflow(name=f"prefix-{prefix}")
    async def ask(ctx: tether.Ctx) -> str:
        return (await tpai.run(ctx, agent, "Hi")).output

    engine = tether.Engine(models=[model], store=f"sqlite:///{tmp_path}/t.db")  # no routing: the agent's model
    try:
        outcome = await engine.run(ask, run_id="prefix")
    finally:
        await engine.close()
    assert outcome.status == "ok", outcome.error
    assert outcome.value == "served"
    assert [r.model for r in model.requests] == ["m1"]
    assert set(outcome.cost.by_model) == {f"{adapter}:m1"}
