"""`compact(model)`: the same pydantic instance, with its field values kept inline rather than in a dict.

pydantic gives every instance a `__dict__` of all its fields: 600-800 bytes for a model of twenty fields,
however many are set. CPython keeps an instance's attributes inline (with keys shared by every
instance of the class) when they are set one by one, a quarter of that. A run with 10,000 agents in
flight holds tens of thousands of such instances (journal entries, loop states, requests), so the
engine compacts the ones it keeps.

A compact instance is the same model: equal, the same fields, fields set, extras and private state,
the same serialization; it is mutable exactly when the original was (assignment still goes through
pydantic). Only the layout of its values in memory differs (CPython 3.11 and later; elsewhere it is
merely an equal copy). A model class that adds `__slots__` of its own is returned unchanged, since
its instances hold state this copy would not carry over.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def compact(model: M, fields_set: set[str] | None = None) -> M:
    """`model` rebuilt with inline values; `fields_set`, when given, replaces its set of set fields (a set
    shared by many instances must then never be mutated: only for instances nobody assigns to)."""
    cls = type(model)
    if not _plain_layout(cls):
        return model
    out = cls.__new__(cls)
    put = object.__setattr__
    fill_inline(out, model.__dict__)
    put(out, "__pydantic_fields_set__", model.__pydantic_fields_set__ if fields_set is None else fields_set)
    put(out, "__pydantic_extra__", model.__pydantic_extra__)
    put(out, "__pydantic_private__", model.__pydantic_private__)
    return out


def set_field(model: BaseModel, name: str, value: object) -> None:
    """`model.<name> = value` for a declared field of a model that validates no assignment, as pydantic's own
    handler does it (the value, then the fields set), minus its Python frames, and keeping inline values
    inline (pydantic's handler writes through `__dict__`, which turns them into a dict)."""
    object.__setattr__(model, name, value)
    model.__pydantic_fields_set__.add(name)


def fill_inline(instance: object, values: dict[str, Any]) -> None:
    """Set `values` as the attributes of `instance`, which has none yet, in one C call, keeping
    them inline (CPython's shared-key layout, as one `setattr` per value would, at a fraction of the cost).

    Writes go through the instance's `__dict__`, whose first key is put in alone: `update()` into an empty
    dict copies the source's whole table instead, a dict of its own about twice the size.
    """
    if not values:
        return
    state = instance.__dict__
    first = next(iter(values))
    state[first] = values[first]
    state.update(values)


def _plain_layout(cls: type[BaseModel]) -> bool:
    """Whether instances of `cls` hold exactly pydantic's state (no class between it and BaseModel adds slots)."""
    for klass in cls.__mro__:
        if klass is BaseModel:
            return True
        if "__slots__" in vars(klass):
            return False
    return False
