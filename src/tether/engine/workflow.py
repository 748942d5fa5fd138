"""`@tether.workflow`: a named async body over `ctx`."""

from __future__ import annotations

import functools
import hashlib
import inspect
import textwrap
from collections.abc import Awaitable, Callable
from typing import Any, overload

from tether.contracts.errors import ConfigError

Body = Callable[..., Awaitable[Any]]


class Workflow:
    """A workflow: a name and an `async def body(ctx, **args)`."""

    def __init__(self, fn: Body, name: str | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        functools.update_wrapper(self, fn)

    @functools.cached_property
    def code_hash(self) -> str:
        """The body's code identity: sha256 of its source text (dedented), else of its bytecode and constants;
        journaled in the genesis so a forecast compares runs of the same code (docs/budgets.md)."""
        return code_hash(self.fn)

    def __call__(self, ctx: Any, **args: Any) -> Awaitable[Any]:
        return self.fn(ctx, **args)

    def __repr__(self) -> str:
        return f"Workflow({self.name!r})"


def code_hash(fn: Any) -> str:
    """sha256 (first 16 hex digits) of `fn`'s source, or of its bytecode when the source cannot be read."""
    try:
        text = textwrap.dedent(inspect.getsource(fn)).encode()
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        text = code.co_code + repr(code.co_consts).encode() if code is not None else repr(fn).encode()
    return hashlib.sha256(text).hexdigest()[:16]


@overload
def workflow(fn: Body, /) -> Workflow: ...
@overload
def workflow(*, name: str | None = None) -> Callable[[Body], Workflow]: ...


def workflow(fn: Body | None = None, /, *, name: str | None = None) -> Any:
    """Mark an `async def body(ctx, **args)` as a workflow; `name` defaults to the function name."""
    if fn is not None:
        return Workflow(fn, name)

    def wrap(f: Body) -> Workflow:
        return Workflow(f, name)

    return wrap


def as_workflow(wf: Workflow | Body) -> Workflow:
    return wf if isinstance(wf, Workflow) else Workflow(wf)


def resolve_workflow(workflows: dict[str, Workflow], wf: Workflow | Body | str) -> Workflow:
    """The workflow `wf` names in `workflows`: a registered name, or a workflow or function (registered if new)."""
    if isinstance(wf, str):
        if wf not in workflows:
            raise ConfigError(f"no workflow named {wf!r} is registered; known: {sorted(workflows)}")
        return workflows[wf]
    w = as_workflow(wf)
    known = workflows.setdefault(w.name, w)
    return known if known.fn is w.fn else w  # the same function: its registered wrapper (its code hash is cached)
