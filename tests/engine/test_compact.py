"""`compact(model)` is the same model: equal, same dump, same set fields and extras, mutable as before."""

from __future__ import annotations

import sys

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from tether.agents.state import LoopState
from tether.contracts.compact import compact, fill_inline
from tether.contracts.entries import JournalEntry
from tether.contracts.messages import Message
from tether.contracts.usage import Usage, sum_usage
from tether.engine.tree import LeanEntries


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")
    a: int = 0
    b: list[int] = []
    c: str | None = None


class _Slotted(_Open):
    __slots__ = ("side",)


@given(st.integers(), st.lists(st.integers(), max_size=3), st.none() | st.text(max_size=4),
       st.dictionaries(st.sampled_from(["x", "y"]), st.integers(), max_size=2))
def test_compact_is_the_same_model(a: int, b: list[int], c: str | None, extra: dict[str, int]) -> None:
    model = _Open(a=a, b=b, **({"c": c} if c is not None else {}), **extra)
    small = compact(model)
    assert small == model and small is not model
    assert small.model_dump() == model.model_dump()
    assert small.model_dump_json() == model.model_dump_json()
    assert small.model_fields_set == model.model_fields_set
    assert small.model_extra == model.model_extra
    small.a = a + 1  # assignment still goes through pydantic
    assert small.a == a + 1 and "a" in small.model_fields_set


def test_a_model_with_slots_of_its_own_is_returned_unchanged() -> None:
    model = _Slotted(a=1)
    assert compact(model) is model


def test_compact_loop_state_and_messages_round_trip_as_before() -> None:
    state = LoopState.start("hello")
    assert state.model_fields_set == {"messages"}
    assert LoopState.model_validate_json(state.model_dump_json()) == state
    state.turns += 1
    state.tool_budget.units_used = 2.0
    assert LoopState.model_validate_json(state.model_dump_json()) == state
    assert Message.text("user", "hi") == Message(role="user", parts=Message.text("user", "hi").parts)
    assert compact(Usage(input_tokens=3)) + Usage(output_tokens=1) == Usage(input_tokens=3, output_tokens=1)


@given(st.lists(st.integers(0, 50), min_size=10, max_size=10), st.booleans())
def test_usage_minus_is_the_count_by_count_difference(counts: list[int], approximate: bool) -> None:
    a = Usage(input_tokens=counts[0], output_tokens=counts[1], cache_read_tokens=counts[2],
              cache_write_tokens=counts[3], reasoning_tokens=counts[4], approximate=approximate)
    b = Usage(input_tokens=counts[5], output_tokens=counts[6], cache_read_tokens=counts[7],
              cache_write_tokens=counts[8], reasoning_tokens=counts[9])
    expected = Usage(**{name: max(0, getattr(a, name) - getattr(b, name)) for name in
                        ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                         "reasoning_tokens")}, approximate=a.approximate)
    assert a.minus(b) == expected
    assert a.minus(Usage()) is a


_usage = st.builds(Usage, input_tokens=st.integers(0, 9), output_tokens=st.integers(0, 9),
                   cache_read_tokens=st.integers(0, 3), reasoning_tokens=st.integers(0, 3), approximate=st.booleans())


@given(st.lists(_usage, max_size=6))
def test_sum_usage_is_what_adding_one_by_one_makes(items: list[Usage]) -> None:
    added = Usage()
    for u in items:
        added = added + u
    total = sum_usage(items)
    assert total == added
    assert total.model_dump_json() == added.model_dump_json()


@given(st.lists(st.integers(min_value=0, max_value=10**9), min_size=5, max_size=5), st.booleans())
def test_usage_serializes_reasoning_only_when_nonzero(counts: list[int], approximate: bool) -> None:
    """Zero reasoning is left out in both dump modes (stored journals predate the field), any other
    count is written; every other field is always written, and the JSON reads back equal."""
    names = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
    usage = Usage(**dict(zip(names, counts, strict=True)), approximate=approximate)
    expected = {**dict(zip(names, counts, strict=True)), "approximate": approximate}
    if not usage.reasoning_tokens:
        del expected["reasoning_tokens"]
    assert usage.model_dump() == expected
    assert usage.model_dump(mode="json", exclude_none=True) == expected
    assert Usage.model_validate_json(usage.model_dump_json()) == usage


def test_assigning_a_loop_state_field_is_what_pydantic_assignment_does() -> None:
    import pytest

    fast, plain = LoopState.start("q"), LoopState(messages=[Message.text("user", "q")])
    for state in (fast, plain):
        state.turns = 3
        state.finish_reason = "stop"
    BaseModel.__setattr__(plain, "served_by", "m")  # pydantic's own path
    fast.served_by = "m"
    assert fast == plain
    assert fast.model_dump_json() == plain.model_dump_json()
    assert {"turns", "finish_reason", "served_by"} <= fast.model_fields_set
    with pytest.raises(ValueError, match="no field"):
        fast.not_a_field = 1


def test_values_filled_in_one_call_stay_in_the_shared_key_layout() -> None:
    """`fill_inline` (one `update`) keeps what one `setattr` per field keeps: the instance's own dict is the
    small split table over the class's shared keys, not a table of its own (an `update()` into the empty
    dict would copy the source's whole table)."""
    fields = {"kind": "agent", "scope": "", "key": "k" * 64, "ordinal": 0, "status": "running"}
    validated = JournalEntry(**fields)
    lean = LeanEntries()(**fields)
    assert lean == validated
    assert sys.getsizeof(lean.__dict__) * 2 < sys.getsizeof(validated.__dict__)
    state = LoopState.start("hello")
    assert sys.getsizeof(state.__dict__) < sys.getsizeof(LoopState(messages=state.messages).__dict__)
    empty = _Open.__new__(_Open)
    fill_inline(empty, {})  # nothing to set: nothing happens
    assert not empty.__dict__
