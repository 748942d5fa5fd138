"""`ReturnTypes`: replayed values revalidated into the return type their callable declares.

A host step or child workflow annotated `-> Verdict` gets a `Verdict` back on replay, not the journaled
dict. Building a `TypeAdapter` costs tens of microseconds, so each callable's is built once per engine.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter, ValidationError

_LIMIT = 4096
"""Callables remembered per engine (code built at run time, e.g. by `exec`, must not grow it forever)."""


class ReturnTypes:
    """One engine's cache of return-type adapters, by the callable's code and its declared return."""

    def __init__(self) -> None:
        self._adapters: dict[tuple[Any, Any], TypeAdapter[Any] | None] = {}

    def revalidate(self, fn: Callable[..., Any], value: Any, warn: Callable[[str, str], None]) -> Any:
        """`value` as `fn`'s declared return type; as it is, with a warning, when it no longer validates
        (the annotation changed since the value was journaled)."""
        declared = getattr(fn, "__annotations__", None)
        if not declared or "return" not in declared:
            return value  # nothing declared (a lambda, most often): no adapter to build
        code = getattr(fn, "__code__", None)
        cache_key = (code if code is not None else fn, _hashable(declared["return"]))
        try:
            adapter = self._adapters[cache_key]
        except KeyError:
            if len(self._adapters) >= _LIMIT:
                self._adapters.clear()
            adapter = self._adapters[cache_key] = _return_adapter(fn)
        except TypeError:  # an unhashable callable: build it this once
            adapter = _return_adapter(fn)
        if adapter is None:
            return value
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            name = getattr(fn, "__qualname__", repr(fn))
            warn(f"revalidate:{name}", f"the journaled result of {name} no longer validates as its declared "
                 f"return type ({exc.error_count()} error(s): {exc.errors()[0]['msg']}); it is returned as "
                 f"journaled. Change the annotation back, or invalidate the entry to run it again.")
            return value


def _hashable(annotation: Any) -> Any:
    try:
        hash(annotation)
    except TypeError:
        return repr(annotation)
    return annotation


def _return_adapter(fn: Callable[..., Any]) -> TypeAdapter[Any] | None:
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception:
        return None
    ret = hints.get("return")
    if ret is None or ret is Any:
        return None
    try:
        return TypeAdapter(ret)
    except Exception:
        return None
