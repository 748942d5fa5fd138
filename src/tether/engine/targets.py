"""Which `tether.Engine` and workflow a `MODULE:ATTR` target names: the one resolution the CLI, the worker
and run cassettes use.

`--app MODULE:ATTR` names an Engine. Without it, `tether run MODULE:WORKFLOW` uses MODULE's `engine`
attribute when it has one; otherwise a default engine on the configured store (it has no models, so a
workflow that calls one fails with a line saying how to provide it).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Literal

from tether.contracts.errors import ConfigError, TetherError
from tether.stores import DEFAULT_STORE_URL as DEFAULT_STORE

if TYPE_CHECKING:  # imported where a target is resolved, so a command that resolves none never loads the engine
    from tether.engine.engine import Engine
    from tether.engine.workflow import Workflow

EngineSource = Literal["app", "module", "default"]
MODULE_ENGINE_ATTR = "engine"
STORE_ENV = "TETHER_STORE"


class TargetError(ConfigError):
    """A target is not MODULE:ATTR (on a command line: a usage error)."""

    code = "usage"


@dataclass(frozen=True)
class Resolved:
    """What a command runs: the engine, where it came from, and the workflow when one was named."""

    engine: Engine
    source: EngineSource
    workflow: Workflow | None = None
    target: str | None = None
    """The `--app` or `MODULE:WORKFLOW` text the engine was found through (None: the default engine)."""

    @property
    def has_models(self) -> bool:
        return bool(self.engine.adapters)


def configured_store(url: str | None) -> str:
    """The store URL in force: `--store`, else `TETHER_STORE`, else the documented default."""
    return url or os.environ.get(STORE_ENV) or DEFAULT_STORE


def _split(target: str, what: str, example: str) -> tuple[str, str]:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise TargetError(f"{what} {target!r} must be MODULE:ATTR, e.g. {example}", target=target)
    return module_name, attr


def import_module(module_name: str, target: str) -> ModuleType:
    """Import MODULE with the working directory first on `sys.path`; failures are one-line `ConfigError`s."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigError(
                f"{target!r}: no module named {module_name!r} importable from {cwd}; run from the directory "
                f"that holds it, or install it",
                target=target, module=module_name,
            ) from None
        raise ConfigError(
            f"{target!r}: importing {module_name!r} failed: it needs the module {missing!r}, which is not installed",
            target=target, module=module_name, missing=missing,
        ) from exc
    except TetherError:
        raise  # the module's own set-up error (a missing key or extra) says what to do already
    except Exception as exc:
        raise ConfigError(
            f"{target!r}: importing {module_name!r} raised {type(exc).__name__}: {exc} (tether --debug ... shows "
            f"the traceback)",
            target=target, module=module_name,
        ) from exc


def _attribute(module: ModuleType, attr: str, target: str, hint: str) -> object:
    obj: object = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(
                f"{target!r}: module {module.__name__!r} has no attribute {attr!r}; {hint}",
                target=target, module=module.__name__, attr=attr,
            )
        obj = getattr(obj, part)
    return obj


def load_engine(target: str) -> Engine:
    """The `tether.Engine` that `--app MODULE:ATTR` names (ATTR may be dotted: `app:services.engine`)."""
    from tether.engine.engine import Engine

    module_name, attr = _split(target, "--app", "--app myapp.engine:engine")
    module = import_module(module_name, target)
    obj = _attribute(module, attr, target, "name the variable that holds your tether.Engine")
    if not isinstance(obj, Engine):
        raise ConfigError(
            f"--app {target!r}: {module_name}.{attr} is a {type(obj).__name__}, not a tether.Engine; point --app "
            f"at the Engine instance (e.g. engine = tether.Engine(...))",
            target=target, found=type(obj).__name__,
        )
    return obj


def load_workflow(target: str) -> tuple[Workflow, ModuleType]:
    """The workflow `MODULE:WORKFLOW` names (a `@tether.workflow` or a plain `async def`) and its module."""
    from tether.engine.workflow import Workflow

    module_name, attr = _split(target, "workflow", "myapp.flows:panel")
    module = import_module(module_name, target)
    obj = _attribute(module, attr, target, "name an async def workflow (tether.workflow) defined there")
    if isinstance(obj, Workflow):
        return obj, module
    if inspect.iscoroutinefunction(obj):
        return Workflow(obj), module
    raise ConfigError(
        f"{target!r}: {module_name}.{attr} is a {type(obj).__name__}, not a workflow; name an `async def "
        f"body(ctx, **args)` (decorate it with @tether.workflow)",
        target=target, found=type(obj).__name__,
    )


def resolve(*, app: str | None = None, workflow: str | None = None, store: str | None = None) -> Resolved:
    """The engine (and workflow) a command drives; the one resolution behind run, resume, worker and serve.

    `app` (`--app MODULE:ATTR`) wins; else MODULE's `engine` attribute when `workflow` names a module
    that has one; else a default engine on `store` (the caller's `--store` / `TETHER_STORE` / default).
    The store of an app or module engine: `--store` when given; else the store its code names; else
    (it was left on the default) `TETHER_STORE` when set. `TETHER_STORE` never overrides a store the
    code names.
    """
    from tether.engine.engine import Engine

    wf, module = load_workflow(workflow) if workflow is not None else (None, None)
    source: EngineSource
    if app is not None:
        engine, source, target = load_engine(app), "app", app
    elif module is not None and hasattr(module, MODULE_ENGINE_ATTR):
        found = getattr(module, MODULE_ENGINE_ATTR)
        if not isinstance(found, Engine):
            raise ConfigError(
                f"{workflow!r}: {module.__name__}.{MODULE_ENGINE_ATTR} is a {type(found).__name__}, not a "
                f"tether.Engine; rename it, or pass --app MODULE:ATTR naming your engine",
                target=workflow, found=type(found).__name__,
            )
        engine, source, target = found, "module", f"{module.__name__}:{MODULE_ENGINE_ATTR}"
    else:
        return Resolved(Engine(store=configured_store(store)), "default", wf, None)
    if store is not None:
        engine.use_store(store)  # an explicit --store points the app's engine elsewhere (a worker cluster's store)
    elif engine.store_url == DEFAULT_STORE and os.environ.get(STORE_ENV):
        engine.use_store(os.environ[STORE_ENV])  # the engine names no store: the environment's is the one in force
    return Resolved(engine, source, wf, target)
