"""The one canonical-JSON function writes RFC 8785's bytes on its fast path too (content keys never change)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.contracts.errors import NonSerializableValueError
from tether.journal.canonical import canonical_json, to_jsonable

# Keys and strings over all of Unicode (controls, quotes, backslashes, the BMP edge, astral planes) but
# no lone surrogates, which neither encoder accepts.
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | text
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4), max_leaves=25
)


@settings(max_examples=600, deadline=None)
@given(json_values)
def test_canonical_json_is_rfc8785_for_any_json_value(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_to_jsonable_returns_an_equal_copy_that_shares_no_container(value: Any) -> None:
    copied = to_jsonable(value)
    assert copied == value or value != value  # (NaN is excluded above; equality is exact)
    if isinstance(value, dict | list) and value:
        assert copied is not value


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [1, 2, {"z": "é\n\x01\x1f\u2028"}]},
        {"\U0001f600": 1, "\ufb33": 2},  # astral vs high-BMP keys: UTF-16 order differs from code points
        {"x": 2.0, "y": 1e21, "z": -0.0},  # ECMAScript number forms, not Python's repr
        [True, False, None, "", 0],
        {"k": 2**53 - 1},
    ],
)
def test_edge_values_match_rfc8785(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def test_out_of_range_integers_and_cycles_are_typed_errors() -> None:
    with pytest.raises(NonSerializableValueError):
        canonical_json({"n": 2**53})
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(NonSerializableValueError):
        canonical_json(cyclic)


@settings(max_examples=200, deadline=None)
@given(st.lists(text, min_size=1, max_size=6), st.lists(text, max_size=3), st.integers(0, 5))
def test_the_incremental_input_estimate_is_the_whole_requests_canonical_size(
    texts: list[str], tool_names: list[str], grown: int
) -> None:
    from tether.agents.dispatch import estimate_input_tokens
    from tether.contracts.messages import ChatRequest, Message, ToolSpec

    def whole(request: ChatRequest) -> int:  # the definition: one canonical JSON of every message and tool
        return max(1, len(canonical_json([*request.messages, *request.tools])) // 4)

    messages = [Message.text("user" if i % 2 else "assistant", t) for i, t in enumerate(texts)]
    tools = tuple(ToolSpec(name=n or "t", description=n, parameters={"type": "object", "x": 1.5}) for n in tool_names)
    sizes: dict[int, tuple[Any, int]] = {}
    first = ChatRequest(model="m", messages=tuple(messages), tools=tools)
    assert estimate_input_tokens(first, sizes) == whole(first)
    later = ChatRequest(model="m", messages=(*messages, *[Message.text("user", f"more {i}") for i in range(grown)]),
                        tools=tools)
    assert estimate_input_tokens(later, sizes) == whole(later)  # cached sizes, same answer


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["system", "user", "assistant", "tool"]), st.text(st.characters(), max_size=16), st.booleans())
def test_a_messages_counted_size_is_its_canonical_size(role: str, body: str, two_parts: bool) -> None:
    """One text part is counted without dumping the message; any other message is dumped: both are its size."""
    from tether.agents.dispatch import _canonical_size
    from tether.contracts.messages import Message, TextPart

    parts = (TextPart(text=body), TextPart(text="more")) if two_parts else (TextPart(text=body),)
    message = Message(role=role, parts=parts)  # type: ignore[arg-type]
    try:
        expected = len(canonical_json(message))
    except NonSerializableValueError:  # a lone surrogate: refused the same way
        with pytest.raises(NonSerializableValueError):
            _canonical_size(message)
        return
    assert _canonical_size(message) == expected


@settings(max_examples=600, deadline=None)
@given(st.text(max_size=16) | st.text(st.characters(), max_size=16))
def test_a_steps_key_is_the_content_key_of_its_identity(name: str) -> None:
    from tether.journal.canonical import content_key, step_key

    identity = {"kind": "step", "key": name, "deps": []}
    try:
        expected = content_key(identity)
    except NonSerializableValueError:  # a lone surrogate: refused the same way
        with pytest.raises(NonSerializableValueError):
            step_key(name)
        return
    assert step_key(name) == expected
    assert expected == hashlib.sha256(rfc8785.dumps(identity)).hexdigest()


@pytest.mark.parametrize("name", ["", "s1", 'q"\\\n\x00\x1f', "é\u2028\U0001f600", "\ud800", 7, None])
def test_a_steps_key_edge_names(name: Any) -> None:
    from tether.journal.canonical import content_key, step_key

    identity = {"kind": "step", "key": name, "deps": []}
    try:
        expected = content_key(identity)
    except NonSerializableValueError:
        with pytest.raises(NonSerializableValueError):
            step_key(name)
        return
    assert step_key(name) == expected


def test_the_prompt_estimate_is_the_built_requests_estimate() -> None:
    """Admission estimates the first request without building it; the figure is the built request's."""
    import tether
    from tether.agents.dispatch import build_request, estimate_input_tokens, estimate_prompt_tokens
    from tether.agents.host import AgentSpec, OutputSpec, ResolvedModel
    from tether.contracts.messages import Message

    model = ResolvedModel(ref="fake:m", adapter=tether.models.fake("fake", script=[]), name="m")

    @tether.tool
    def lookup(city: str) -> str:
        """Find a city."""
        return city

    for spec in (AgentSpec(prompt="hello " * 40, models=[model]),
                 AgentSpec(prompt="use it", models=[model], tools=[lookup], system="be brief",
                           output=OutputSpec(schema={"type": "object", "properties": {"a": {"type": "string"}}}))):
        messages = [Message.text("user", spec.prompt)]
        built, _ = build_request(spec, model, messages)
        assert estimate_prompt_tokens(spec, model, messages) == estimate_input_tokens(built)
