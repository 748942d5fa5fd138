"""`Record`: what the engine's hot records share (journal entries, events, loop state): one adapter.

The engine builds several of these per agent call and keeps many of them alive (a run keeps every
journal entry and every event it emitted), so each is a plain slotted dataclass that holds its values
and nothing else. Validation and the JSON form go through one pydantic `TypeAdapter` per class, at
the boundary where a record is stored, sent to a sink or read back; the helpers below are that
adapter's, named as pydantic's own are so code written against the models keeps working.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import linecache
import re
import textwrap
from dataclasses import replace
from typing import Any, ClassVar, Literal, Self, TypeVar

from pydantic import Field, TypeAdapter

T = TypeVar("T", bound=type)


class Record:
    """Mix into a `@dataclass(slots=True)` record: its adapter and the JSON helpers over it."""

    __slots__ = ()
    _adapter: ClassVar[TypeAdapter[Any] | None] = None

    @classmethod
    def adapter(cls) -> TypeAdapter[Self]:
        """The class's own `TypeAdapter`, built on first use (each subclass gets its own)."""
        found = cls.__dict__.get("_adapter")
        if found is None:
            found = TypeAdapter(cls)
            cls._adapter = found  # a class attribute: the adapter is a fact about the class, not state
        return found

    @classmethod
    def model_validate(cls, data: Any) -> Self:
        """Validate JSON data (a dict) or an instance as this record."""
        return cls.adapter().validate_python(data)

    @classmethod
    def model_validate_json(cls, text: str | bytes) -> Self:
        return cls.adapter().validate_json(text)

    def model_dump(
        self, *, mode: Literal["json", "python"] = "python", include: set[str] | None = None,
        exclude: set[str] | None = None, exclude_none: bool = False,
    ) -> dict[str, Any]:
        """The record's fields as a dict (`mode="json"`: JSON values)."""
        data: dict[str, Any] = self.adapter().dump_python(self, mode=mode, include=include, exclude=exclude,
                                                          exclude_none=exclude_none)
        return data

    def model_dump_json(self, *, exclude_none: bool = False) -> str:
        """The record as compact JSON."""
        return self.adapter().dump_json(self, exclude_none=exclude_none).decode()

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Self:
        """A copy with `update` applied (`dataclasses.replace`: validated as the class's own `__init__` is)."""
        return replace(self, **(update or {}))  # type: ignore[type-var]


def documented(cls: T) -> T:
    """Put each attribute docstring of `cls` (the string right after a field's declaration) on that field as a
    pydantic `Field(description=...)`, so schemas carry it and subclasses of a dataclass inherit it.

    Apply under a `kw_only=True` dataclass decorator (it reads the class body as written). Each `Field` says
    `kw_only=True` itself: pydantic reads a `Field` default's own `kw_only`, not the decorator's, and a field it
    takes for positional makes every construction validate through its slower path (about twice the cost)."""
    try:
        source = textwrap.dedent(_class_source(cls))
    except (OSError, TypeError):  # no source (a class built at run time): nothing to read
        return cls
    body = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)).body
    for node, after in itertools.pairwise(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            continue
        name, doc = node.target.id, inspect.cleandoc(after.value.value)
        default = cls.__dict__.get(name, dataclasses.MISSING)
        if isinstance(default, dataclasses.Field):
            setattr(cls, name, Field(default_factory=default.default_factory, description=doc,  # type: ignore[arg-type]
                                      kw_only=True))
        elif default is dataclasses.MISSING:
            setattr(cls, name, Field(description=doc, kw_only=True))
        else:
            setattr(cls, name, Field(default=default, description=doc, kw_only=True))
    return cls


def _class_source(cls: type) -> str:
    """The source of `cls`'s block. A top-level class whose name one `class` line of its file declares is cut
    from the file's lines (`linecache`, read once per file) by `inspect.getblock`; `inspect.getsource`, which
    re-walks the whole module for every class (most of what importing the events cost), does the rest."""
    file = inspect.getsourcefile(cls)
    lines = linecache.getlines(file) if file else []
    declares = re.compile(rf"\s*class\s+{re.escape(cls.__name__)}\b")
    starts = [i for i, line in enumerate(lines) if declares.match(line)]
    if "." in cls.__qualname__ or len(starts) != 1:
        return inspect.getsource(cls)
    return "".join(inspect.getblock(lines[starts[0]:]))
