"""The reference a new user reads: every `@tether.tool` option in docs/tools.md, every `ctx.agent` parameter documented."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import tether
from tether.tools.definition import parse_docstring

ROOT = Path(__file__).resolve().parents[2]


def _documented_options(page: str) -> set[str]:
    """The options named in the first column of the page's Options table."""
    table = page.split("## Options", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE))


def test_docs_tools_lists_every_option_of_the_tool_decorator() -> None:
    page = (ROOT / "docs" / "tools.md").read_text()
    options = {p.name for p in inspect.signature(tether.tool).parameters.values() if p.kind is p.KEYWORD_ONLY}
    assert {"needs_approval", "idempotent", "parallel_safe", "units", "timeout_s", "executor", "env"} <= options
    assert _documented_options(page) == options
    fields = {f for f in tether.Tool.__dataclass_fields__ if not f.startswith("_")}
    caps = {"max_processes", "max_memory_bytes", "max_cpu_s", "max_result_bytes"}  # shorthands folded into `limits`
    assert fields - {"fn", "parameters", "args_model"} == options - caps  # the Tool's options are the decorator's


def test_the_tools_page_is_linked_from_the_readme_table_and_the_agents_page() -> None:
    readme = (ROOT / "README.md").read_text()
    (row,) = [line for line in readme.splitlines() if "(docs/tools.md)" in line]
    assert row.startswith("| tools:")
    assert "(tools.md)" in (ROOT / "docs" / "agents.md").read_text()


def test_ctx_agent_documents_every_parameter_it_takes() -> None:
    params = [p for p in inspect.signature(tether.Ctx.agent).parameters if p != "self"]
    _, documented = parse_docstring(inspect.getdoc(tether.Ctx.agent) or "")
    assert list(documented) == params
    assert all(len(text) > 15 for text in documented.values()), documented
