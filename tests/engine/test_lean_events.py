"""The agent's hot events built without a second validation (`LeanEvents`) are the events pydantic builds;
anything the table does not cover, or fields it would have to judge, are left to pydantic."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tether.contracts.events import AgentEnd, BudgetDraw, LeanEvents, ModelEnd, RunStart, lean_event
from tether.contracts.usage import Usage

_end = st.fixed_dictionaries(
    {"status": st.sampled_from(["ok", "error", "limit", "cancelled", "skipped"])},
    optional={
        "output": st.none() | st.text(max_size=8), "cost_usd": st.integers(0, 5) | st.floats(0, 5),
        "turns": st.integers(0, 9), "served_by": st.none() | st.text(max_size=6),
        "usage": st.builds(Usage, input_tokens=st.integers(0, 99), output_tokens=st.integers(0, 99)),
        "agent_id": st.none() | st.integers(1, 99), "label": st.none() | st.text(max_size=6),
        "provider_calls": st.integers(0, 5), "reason": st.none() | st.text(max_size=6),
    },
)


def _same(built: Any, reference: Any) -> None:
    assert type(built) is type(reference) and built == reference
    assert built.model_dump_json() == reference.model_dump_json()
    assert list(built.__dict__) == list(reference.__dict__)  # declaration order, as validation sets it
    assert {n: type(v) for n, v in built} == {n: type(v) for n, v in reference}
    assert built.model_fields_set == reference.model_fields_set


@given(_end)
def test_an_agent_end_is_the_one_pydantic_builds(fields: dict[str, Any]) -> None:
    _same(LeanEvents((AgentEnd,))(AgentEnd, **dict(fields)), AgentEnd(**fields))


def test_ints_in_float_fields_become_floats_and_the_template_is_never_shared() -> None:
    lean = LeanEvents((BudgetDraw, ModelEnd))
    draw = lean(BudgetDraw, agent_id=1, step=1, tokens=6, usd=0, remaining_usd=2)
    assert type(draw.usd) is float and type(draw.remaining_usd) is float
    _same(draw, BudgetDraw(agent_id=1, step=1, tokens=6, usd=0, remaining_usd=2))
    first = lean(ModelEnd, call=1, model="fake:m", provider="fake", status="ok")
    first.__dict__["seq"] = 7  # what the stream's stamp does to an event it emits
    assert lean(ModelEnd, call=2, model="fake:m", provider="fake", status="ok").seq == 0


def test_what_the_table_does_not_judge_is_left_to_pydantic() -> None:
    with pytest.raises(ValidationError):  # an unknown field
        lean_event(AgentEnd, status="ok", colour="red")
    with pytest.raises(ValidationError):  # a missing required one
        lean_event(BudgetDraw, step=1, tokens=2)
    started = lean_event(RunStart, workflow="w")  # a type outside the table: validated as always
    assert started == RunStart(workflow="w")
