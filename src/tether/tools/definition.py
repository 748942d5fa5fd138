"""Tool definitions: `Tool`, the `@tool` decorator, argument validation and the toolset hash."""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic.fields import FieldInfo

from tether.contracts.errors import ConfigError, TetherError
from tether.contracts.messages import ToolSpec
from tether.contracts.protocols import Executor, ToolLimits
from tether.journal.canonical import content_key
from tether.tools.schema import Issue as Issue
from tether.tools.schema import check_schema, json_schema_issues

INJECTED_PARAMS = frozenset({"idempotency_key", "workdir", "cwd"})
"""Parameters an executor supplies when the function declares them; hidden from the model."""

schema_issues = json_schema_issues
"""A hand-written tool's argument check: full JSON-schema validation (Draft 2020-12)."""


class ModelRetry(Exception):
    """Raised by a tool to ask the model to try again; the message becomes the tool result."""


class ToolArgsError(TetherError):
    """A model's tool arguments failed validation; `issues` lists what was wrong."""

    code = "tool-args"

    @property
    def issues(self) -> list[Issue]:
        return list(self.data.get("issues", []))


class ToolExecutionError(TetherError):
    """A dispatched call ended `error` or `timeout` (`data["outcome"]`); it becomes an error tool result."""

    code = "tool-execution"

    @property
    def outcome(self) -> str:
        return str(self.data.get("outcome", "error"))

    @property
    def limit(self) -> str | None:
        """The resource cap the call hit (`max_processes`, `max_memory_bytes`, `max_cpu_s`, `max_result_bytes`)."""
        limit = self.data.get("limit")
        return limit if isinstance(limit, str) else None


@dataclass(frozen=True, eq=False)
class Tool:
    """A tool the model may call: what it sees (`spec`) plus how tether runs and governs it.

    Built by `@tool` from a typed function (pydantic validates the arguments), or by hand with a
    JSON schema, which `jsonschema` enforces (Draft 2020-12) when there is no `args_model`.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    _: KW_ONLY
    version: str | None = None
    needs_approval: bool = False
    idempotent: bool = False
    parallel_safe: bool = False
    executor: str | Executor | None = None
    timeout_s: float | None = None
    units: float | None = None
    """Tool-unit cost for `ToolUnits` budgets (None = the budget's default)."""
    read_paths: tuple[str, ...] = ()
    """Extra paths a sandboxed call may read (bound read-only); other executors ignore them."""
    env: tuple[str, ...] | Mapping[str, str] = ()
    """Environment the call gets: names copied from the engine's environment, or explicit values."""
    limits: ToolLimits = field(default_factory=ToolLimits)
    """Resource caps of an out-of-process call (processes, memory, CPU seconds, result bytes)."""
    args_model: type[BaseModel] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "read_paths", tuple(self.read_paths))
        if not isinstance(self.env, Mapping):
            object.__setattr__(self, "env", tuple(self.env))
        if self.args_model is None:
            check_schema(self.parameters, what=f"the parameters of tool {self.name!r}")
        # `inspect.signature(tool)` reports the function's, so executors see injected keywords.
        with contextlib.suppress(TypeError, ValueError):
            object.__setattr__(self, "__signature__", inspect.signature(self.fn))

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    @property
    def target(self) -> str:
        """`module:qualname` of the function, which out-of-process executors import."""
        return f"{self.fn.__module__}:{self.fn.__qualname__}"

    def env_values(self) -> dict[str, str]:
        """The declared environment, read now: explicit values as given, names from `os.environ`."""
        if isinstance(self.env, Mapping):
            return dict(self.env)
        return {name: os.environ[name] for name in self.env if name in os.environ}

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as JSON data (pydantic-coerced when typed); `ToolArgsError` if invalid."""
        if self.args_model is None:
            issues = schema_issues(dict(args), self.parameters)
            if issues:
                raise _args_error(self.name, issues)
            return dict(args)
        try:
            parsed = self.args_model.model_validate(dict(args))
        except ValidationError as exc:
            raise _args_error(self.name, pydantic_issues(exc)) from None
        return parsed.model_dump(mode="json", exclude_unset=True)

    async def call(self, args: Mapping[str, Any]) -> Any:
        """Run the tool on validated arguments, awaiting it when it is async."""
        result = self(**args)
        if inspect.isawaitable(result):
            result = await result
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function with the model-visible arguments coerced to their declared types.

        JSON arguments become typed values (a dict becomes the pydantic model the signature asks
        for); injected keywords (`idempotency_key`, `workdir`) pass through untouched.
        """
        if self.args_model is None:
            return self.fn(*args, **kwargs)
        bound = inspect.signature(self.fn).bind(*args, **kwargs)
        fields = self.args_model.model_fields
        visible = {k: v for k, v in bound.arguments.items() if k in fields}
        try:
            parsed = self.args_model.model_validate(visible)
        except ValidationError as exc:
            raise _args_error(self.name, pydantic_issues(exc)) from None
        for key in visible:
            bound.arguments[key] = getattr(parsed, key)
        return self.fn(*bound.args, **bound.kwargs)


def _args_error(name: str, issues: list[Issue]) -> ToolArgsError:
    listed = "; ".join(format_issue(i) for i in issues)
    return ToolArgsError(f"invalid arguments for tool '{name}': {listed}", tool=name, issues=issues)


def format_issue(issue: Issue) -> str:
    loc = ".".join(str(p) for p in issue.get("loc", ()))
    return f"{loc}: {issue.get('msg', '')}" if loc else str(issue.get("msg", ""))


def pydantic_issues(exc: ValidationError) -> list[Issue]:
    """Pydantic's errors as plain JSON issues (no input echo, no URLs)."""
    return [
        {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
        for e in exc.errors(include_url=False, include_input=False, include_context=False)
    ]


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    version: str | None = None,
    needs_approval: bool = False,
    idempotent: bool = False,
    parallel_safe: bool = False,
    executor: str | Executor | None = None,
    timeout_s: float | None = None,
    units: float | None = None,
    read_paths: Iterable[str] = (),
    env: Iterable[str] | Mapping[str, str] = (),
    limits: ToolLimits | None = None,
    max_processes: int | None = None,
    max_memory_bytes: int | None = None,
    max_cpu_s: int | None = None,
    max_result_bytes: int | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    version: str | None = None,
    needs_approval: bool = False,
    idempotent: bool = False,
    parallel_safe: bool = False,
    executor: str | Executor | None = None,
    timeout_s: float | None = None,
    units: float | None = None,
    read_paths: Iterable[str] = (),
    env: Iterable[str] | Mapping[str, str] = (),
    limits: ToolLimits | None = None,
    max_processes: int | None = None,
    max_memory_bytes: int | None = None,
    max_cpu_s: int | None = None,
    max_result_bytes: int | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a `Tool` of a typed function, bare (`@tool`) or with options (`@tool(name=...)`).

    Options (each explained in docs/tools.md): `name`, `description` (default: the function's name and
    docstring summary), `version` (bump to re-run journaled agents that used it), `needs_approval` (a
    human allows each call), `idempotent` (safe to re-dispatch after a crash), `parallel_safe` (may run
    concurrently with neighbouring calls), `executor` (`inprocess`, `subprocess`, `sandbox`, `container`
    or an executor), `timeout_s`, `units` (its cost under a `ToolUnits` budget), `read_paths` (extra
    read-only paths in the sandbox), `env` (names to copy, or values to set, in its environment) and the
    resource caps of an out-of-process call, `max_processes`, `max_memory_bytes`, `max_cpu_s` and
    `max_result_bytes` (each given one replaces its default in `limits`; docs/executors.md).
    """
    caps = {k: v for k, v in (("max_processes", max_processes), ("max_memory_bytes", max_memory_bytes),
                              ("max_cpu_s", max_cpu_s), ("max_result_bytes", max_result_bytes)) if v is not None}
    try:
        tool_limits = ToolLimits.model_validate({**(limits or ToolLimits()).model_dump(), **caps})
    except ValidationError as exc:
        bad = exc.errors()[0]
        raise ConfigError(f"tool resource cap {'.'.join(map(str, bad['loc']))}={bad.get('input')!r}: {bad['msg']}; "
                          f"caps are whole numbers >= 1", cap=str(bad["loc"][0])) from None

    def build(f: Callable[..., Any]) -> Tool:
        summary, arg_docs = parse_docstring(inspect.getdoc(f) or "")
        tool_name = name or f.__name__
        args_model = _args_model(f, tool_name, arg_docs)
        return Tool(
            tool_name,
            summary if description is None else description,
            tool_parameters(args_model),
            f,
            version=version,
            needs_approval=needs_approval,
            idempotent=idempotent,
            parallel_safe=parallel_safe,
            executor=executor,
            timeout_s=timeout_s,
            units=units,
            read_paths=tuple(read_paths),
            env=dict(env) if isinstance(env, Mapping) else tuple(env),
            limits=tool_limits,
            args_model=args_model,
        )

    return build if fn is None else build(fn)


def _args_model(
    fn: Callable[..., Any], tool_name: str, arg_docs: dict[str, str]
) -> type[BaseModel]:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable forward refs: fall back to the raw annotations
        hints = dict(getattr(fn, "__annotations__", {}))
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.name in INJECTED_PARAMS:
            continue  # supplied by the executor, never by the model
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigError(
                f"tool '{tool_name}': *{param.name} parameters cannot be described to a model; "
                f"name every argument."
            )
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        doc = arg_docs.get(param.name)
        if doc and not _has_description(annotation, default):
            default = FieldInfo.merge_field_infos(
                default if isinstance(default, FieldInfo) else FieldInfo(default=default),
                description=doc,
            )
        fields[param.name] = (annotation, default)
    model: type[BaseModel] = create_model(
        f"{tool_name}_args", __config__=ConfigDict(extra="forbid"), **fields
    )
    return model


def _has_description(annotation: Any, default: Any) -> bool:
    if isinstance(default, FieldInfo) and default.description:
        return True
    metadata = getattr(annotation, "__metadata__", ())
    return any(isinstance(m, FieldInfo) and m.description for m in metadata)


def tool_parameters(args_model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema the model sees: pydantic's, without the auto-generated titles."""
    schema: dict[str, Any] = _drop_titles(args_model.model_json_schema())
    return schema


def _drop_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in ("properties", "$defs") and isinstance(value, dict):
                out[key] = {k: _drop_titles(v) for k, v in value.items()}
            else:
                out[key] = _drop_titles(value)
        return out
    if isinstance(schema, list):
        return [_drop_titles(s) for s in schema]
    return schema


_SECTION = re.compile(r"^(\w+(?: \w+)?):\s*$")
_ARGS_SECTIONS = frozenset({"Args", "Arguments", "Parameters", "Params", "Keyword Args"})
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and argument docs (Google `Args:`, `:param:`)."""
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    arg_indent: int | None = None
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        sphinx = _SPHINX_PARAM.match(stripped)
        header = _SECTION.match(line)  # unindented `Name:` lines open a section
        if sphinx:
            section, current = "sphinx", sphinx.group(1)
            args[current] = sphinx.group(2).strip()
        elif header:
            section, arg_indent, current = header.group(1), None, None
        elif section is None:
            summary.append(line)
        elif not stripped:
            continue
        elif section in _ARGS_SECTIONS:
            arg_indent = indent if arg_indent is None else arg_indent
            match = _ARG_LINE.match(stripped)
            if match and indent <= arg_indent:
                current = match.group(1)
                args[current] = match.group(2).strip()
            elif current:
                args[current] = f"{args[current]} {stripped}".strip()
        elif section == "sphinx" and current and not stripped.startswith(":"):
            args[current] = f"{args[current]} {stripped}".strip()
    return "\n".join(summary).strip(), args


EMPTY_TOOLSET = content_key([])
"""`toolset_hash(())`: the identity of an agent without tools."""


def toolset_hash(tools: Iterable[Tool]) -> str:
    """Identity of a toolset: what the model sees plus versions, never the implementation."""
    if not tools:  # (a generator is truthy: it takes the long way)
        return EMPTY_TOOLSET  # most agents have no tools: the same key, without hashing `[]` again
    items = sorted(
        (
            {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "version": t.version,
            }
            for t in tools
        ),
        key=lambda item: str(item["name"]),
    )
    return content_key(items)

