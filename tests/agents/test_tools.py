"""Tool definitions, the toolset hash, the permission chain and history projection."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from tether.agents.history import project_history
from tether.contracts.errors import ConfigError
from tether.contracts.messages import Message, RawPart, TextPart
from tether.tools.definition import Tool, ToolArgsError, schema_issues, tool, toolset_hash
from tether.tools.permissions import Permissions


class Filters(BaseModel):
    lang: str


@tool
def search(
    query: str,
    limit: Annotated[int, Field(ge=1, description="How many hits at most.")] = 5,
    filters: Filters | None = None,
) -> list[str]:
    """Search the corpus.

    Args:
        query: The text to look for,
            in any language.
        limit: Overridden by the Field description.
    """
    return [query] * limit


def test_the_decorator_builds_a_tool_from_the_signature_and_docstring() -> None:
    assert isinstance(search, Tool)
    assert (search.name, search.description) == ("search", "Search the corpus.")
    props = search.parameters["properties"]
    assert props["query"] == {
        "type": "string",
        "description": "The text to look for, in any language.",
    }
    assert props["limit"]["description"] == "How many hits at most."
    assert props["limit"]["minimum"] == 1
    assert search.parameters["required"] == ["query"]
    assert "title" not in search.parameters and "title" not in props["query"]
    assert search.spec.name == "search" and search.spec.parameters == search.parameters
    assert search.target.endswith(":search")
    assert search("x", 2) == ["x", "x"]  # still callable as the function


def test_the_decorator_takes_options() -> None:
    @tool(name="rm", description="Remove a file.", version="2", needs_approval=True, timeout_s=3)
    def remove(path: str) -> None:
        """Ignored docstring."""

    assert (remove.name, remove.description, remove.version) == ("rm", "Remove a file.", "2")
    assert remove.needs_approval and remove.timeout_s == 3 and not remove.parallel_safe


def test_validate_coerces_and_reports_pydantic_issues() -> None:
    assert search.validate({"query": "q", "limit": "3"}) == {"query": "q", "limit": 3}
    with pytest.raises(ToolArgsError) as caught:
        search.validate({"limit": 0, "extra": True})
    locs = {tuple(i["loc"]) for i in caught.value.issues}
    assert locs == {("query",), ("limit",), ("extra",)}
    assert "invalid arguments for tool 'search'" in str(caught.value)


async def test_call_passes_typed_values_and_awaits_async_functions() -> None:
    seen: list[Any] = []

    @tool
    async def take(filters: Filters) -> str:
        """Take filters."""
        seen.append(filters)
        return filters.lang

    assert await take.call(take.validate({"filters": {"lang": "de"}})) == "de"
    assert seen == [Filters(lang="de")]


def test_variadic_parameters_are_refused() -> None:
    def bad(*args: int) -> None: ...

    with pytest.raises(ConfigError):
        tool(bad)


def test_hand_written_tools_are_checked_with_jsonschema() -> None:
    def impl(city: str, days: int = 1) -> str:
        return city

    weather = Tool(
        "weather",
        "Forecast.",
        {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
        impl,
        version="1",
    )
    assert weather.validate({"city": "Oslo"}) == {"city": "Oslo"}
    with pytest.raises(ToolArgsError) as caught:
        weather.validate({"days": "two"})
    assert {tuple(i["loc"]) for i in caught.value.issues} == {("city",), ("days",)}


def test_schema_issues_checks_types_enums_and_nesting() -> None:
    schema = {
        "type": "object",
        "properties": {
            "mode": {"enum": ["a", "b"]},
            "items": {"type": "array", "items": {"type": "number"}},
            "flag": {"type": "boolean"},
        },
        "required": ["mode"],
        "additionalProperties": False,
    }
    assert schema_issues({"mode": "a", "items": [1, 2.5], "flag": True}, schema) == []
    issues = schema_issues({"mode": "c", "items": [1, True], "flag": 1, "x": 0}, schema)
    assert {tuple(i["loc"]) for i in issues} == {("mode",), ("items", 1), ("flag",), ("x",)}


def test_hand_written_tool_arguments_get_bounds_and_combinators_checked() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "maximum": 10}, "tag": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "required": ["n"],
    }
    t = Tool("t", "T.", schema, lambda n, tag=None: n)
    assert t.validate({"n": 3, "tag": None}) == {"n": 3, "tag": None}
    with pytest.raises(ToolArgsError) as caught:
        t.validate({"n": 999, "tag": 42})
    assert [(i["loc"], i["type"]) for i in caught.value.issues] == [(["n"], "maximum"), (["tag"], "anyOf")]


def test_a_hand_written_tool_with_an_invalid_schema_is_refused() -> None:
    with pytest.raises(ConfigError, match="parameters of tool 'bad' is not a valid JSON schema"):
        Tool("bad", "Bad.", {"type": "object", "properties": {"x": {"type": "wat"}}}, lambda x: x)


def test_read_paths_and_env_are_tool_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOL_REGION", "eu")

    def fetch(url: str) -> str:
        return url

    named = tool(executor="sandbox", read_paths=["/data"], env=["TOOL_REGION", "TOOL_UNSET_VAR"])(fetch)
    assert named.read_paths == ("/data",) and named.env == ("TOOL_REGION", "TOOL_UNSET_VAR")
    assert named.env_values() == {"TOOL_REGION": "eu"}  # read at dispatch; unset names are left out
    given = tool(env={"MODE": "fast"})(fetch)
    assert given.env_values() == {"MODE": "fast"}
    assert "read_paths" not in named.parameters["properties"] and toolset_hash([named]) == toolset_hash([given])


def _twin(body: str, **overrides: Any) -> Tool:
    """A tool like `search`, with a different implementation and optional changed fields."""

    def impl(query: str) -> str:
        return body

    options: dict[str, Any] = {"version": "1", **overrides}
    parameters = options.pop("parameters", {"type": "object", "properties": {"query": {}}})
    return Tool("lookup", "Look up.", parameters, impl, **options)


def test_toolset_hash_ignores_implementation_and_order() -> None:
    other = Tool("zeta", "Z.", {"type": "object", "properties": {}}, lambda: None)
    assert toolset_hash([_twin("a"), other]) == toolset_hash([other, _twin("b")])
    assert toolset_hash([_twin("a", needs_approval=True, timeout_s=9)]) == toolset_hash(
        [_twin("b")]
    )


def test_toolset_hash_changes_with_parameters_or_version() -> None:
    base = toolset_hash([_twin("a")])
    assert toolset_hash([_twin("a", version="2")]) != base
    changed = {"type": "object", "properties": {"query": {"type": "string"}}}
    assert toolset_hash([_twin("a", parameters=changed)]) != base


@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True))
def test_toolset_hash_is_independent_of_tool_order(names: list[str]) -> None:
    tools = [Tool(n, n.upper(), {"type": "object"}, lambda: None) for n in names]
    assert toolset_hash(tools) == toolset_hash(list(reversed(tools)))


def test_permission_chain_order() -> None:
    def hook(name: str, args: dict[str, Any]) -> Any:
        return "allow" if args.get("force") else None

    perms = Permissions(
        hooks=[hook],
        deny=["danger_*"],
        ask=["send_*"],
        can_use_tool=lambda name, args: "ask" if name == "maybe" else name != "never",
    )

    def make(name: str, needs_approval: bool = False) -> Tool:
        return Tool(name, "", {"type": "object"}, lambda: None, needs_approval=needs_approval)

    assert perms.decide(make("danger_rm"), {"force": True}).decision == "allow"  # hooks first
    verdict = perms.decide(make("danger_rm"), {})
    assert verdict.decision == "deny" and "danger_*" in verdict.reason
    assert perms.decide(make("send_mail"), {}).decision == "ask"
    assert perms.decide(make("maybe"), {}).decision == "ask"
    assert perms.decide(make("never"), {}).decision == "deny"
    assert perms.decide(make("fine"), {}).decision == "allow"
    default = Permissions()
    assert default.decide(make("x"), {}).decision == "allow"
    assert default.decide(make("x", needs_approval=True), {}).decision == "ask"


def test_history_projection_drops_foreign_raw_parts_and_emptied_messages() -> None:
    thinking = RawPart(family="a", data={"t": 1})
    messages = [
        Message.text("user", "hi"),
        Message(role="assistant", parts=(thinking, TextPart(text="answer"))),
        Message(role="assistant", parts=(thinking,)),
    ]
    assert project_history(messages, "a") == tuple(messages)
    projected = project_history(messages, "b")
    assert len(projected) == 2
    assert projected[1].parts == (TextPart(text="answer"),)


def test_executor_injected_keywords_are_hidden_from_the_model_but_kept_in_the_signature() -> None:
    import inspect

    @tool
    def write(path: str, idempotency_key: str = "", workdir: str | None = None) -> str:
        """Write a file."""
        return f"{path}|{idempotency_key}|{workdir}"

    assert list(write.parameters["properties"]) == ["path"]
    assert list(inspect.signature(write).parameters) == ["path", "idempotency_key", "workdir"]
    assert write(path="a", idempotency_key="k", workdir="/w") == "a|k|/w"


def test_calling_a_tool_coerces_json_arguments_to_the_declared_types() -> None:
    @tool
    def pick(filters: Filters, n: int = 1) -> str:
        """Pick."""
        assert isinstance(filters, Filters)
        return filters.lang * n

    assert pick(filters={"lang": "de"}, n="2") == "dede"
    assert pick(Filters(lang="x")) == "x"
    with pytest.raises(ToolArgsError):
        pick(filters={})
