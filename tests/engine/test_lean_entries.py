"""Entries the engine builds compactly (`Tree.entry`) are the same entries pydantic builds: equal, the same
bytes, the same set fields; numbering one in place never reaches another that shares its field set."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tether.contracts.entries import JournalEntry
from tether.contracts.usage import Usage
from tether.engine import tree
from tether.engine.tree import LeanEntries
from tether.stores.codec import entry_json

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_fields = st.fixed_dictionaries(
    {"kind": st.sampled_from(["agent", "step", "decision", "tree"])},
    optional={
        "scope": st.text(max_size=6), "key": st.text(max_size=6), "ordinal": st.integers(0, 5),
        "status": st.sampled_from(["running", "ok", "error", None]), "label": st.none() | st.text(max_size=6),
        "value": _json, "ref": st.none() | st.integers(1, 99), "agent_id": st.none() | st.integers(1, 99),
        "usage": st.none() | st.builds(Usage, input_tokens=st.integers(0, 99), output_tokens=st.integers(0, 99)),
        "cost_usd": st.none() | st.floats(0, 1), "started_at": st.none() | st.floats(0, 2e9),
        "costs": st.none() | st.dictionaries(st.text(max_size=4), st.floats(0, 1), max_size=2),
        "through": st.none() | st.integers(0, 9),
    },
)


def _reference(fields: dict[str, Any]) -> JournalEntry:
    entry = JournalEntry(**{k: v for k, v in fields.items() if v is not None})
    entry.__pydantic_fields_set__.add("seq")
    return entry


@given(_fields)
def test_a_compact_entry_is_the_entry_pydantic_builds(fields: dict[str, Any]) -> None:
    built, reference = LeanEntries()(**fields), _reference(fields)
    assert built == reference
    assert built.model_dump() == reference.model_dump()
    assert built.model_fields_set == reference.model_fields_set
    assert built.model_extra == reference.model_extra
    built.seq = reference.seq = 7
    assert entry_json(built, 7) == entry_json(reference, 7)
    assert built.model_copy(update={"seq": 8}) == reference.model_copy(update={"seq": 8})


def test_entries_of_one_shape_share_one_field_set_and_numbering_reaches_no_other() -> None:
    lean = LeanEntries()
    a = lean(kind="step", scope="s", key="k", status="running")
    b = lean(kind="step", scope="s", key="j", status="ok")
    c = lean(kind="step", scope="s", key="k", label="x")
    assert a.model_fields_set is b.model_fields_set
    assert c.model_fields_set is not a.model_fields_set
    a.seq = 1
    assert (a.seq, b.seq) == (1, None)
    assert a.model_fields_set == {"kind", "scope", "key", "status", "seq"}
    assert JournalEntry.model_validate_json(a.model_dump_json()) == a


def test_the_fields_a_lean_entry_coerces_are_the_models_float_and_dict_fields() -> None:
    fields = JournalEntry.model_fields.items()
    assert {n for n, f in fields if f.annotation == float | None} == tree._FLOATS
    assert {n for n, f in fields if "dict[" in str(f.annotation)} == tree._DICTS


def test_a_lean_entry_takes_what_validation_would_make_of_an_int_clock_and_a_shared_dict() -> None:
    error = {"kind": "terminal"}
    built = LeanEntries()(kind="agent", started_at=5, cost_usd=0, error=error)
    reference = _reference({"kind": "agent", "started_at": 5, "cost_usd": 0, "error": error})
    assert entry_json(built, 1) == entry_json(reference, 1)  # "started_at":5.0, as pydantic writes it
    error["kind"] = "changed"
    assert built.error == {"kind": "terminal"}


@given(st.integers(1, 99), st.integers(0, 9), st.integers(0, 10**6), st.none() | st.integers(0, 10**6),
       st.floats(0, 10) | st.integers(0, 3), st.none() | st.floats(0, 10) | st.integers(0, 3))
def test_a_draw_row_is_the_agent_event_dumped(agent_id: int, step: int, tokens: int, remaining: int | None,
                                               usd: float, remaining_usd: float | None) -> None:
    from tether.contracts.events import AgentEvent
    from tether.engine.tree import draw_row

    row = draw_row(agent_id, step, tokens, remaining, usd, remaining_usd)
    event = AgentEvent(agent_id=agent_id, step=step, kind="budget_draw", tokens=tokens, remaining=remaining,
                       usd=round(usd, 10), remaining_usd=remaining_usd)
    dumped = event.model_dump(exclude_none=True)
    assert row == dumped and list(row) == list(dumped)
    assert {k: type(v) for k, v in row.items()} == {k: type(v) for k, v in dumped.items()}
