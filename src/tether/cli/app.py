"""`load_engine("MODULE:ATTR")`: the application's `tether.Engine`, imported the way `--app` names it."""

from __future__ import annotations

import importlib
import os
import sys

from tether.contracts.errors import ConfigError
from tether.engine.engine import Engine


def load_engine(target: str) -> Engine:
    """Import MODULE (the working directory first on `sys.path`) and return its Engine at ATTR.

    ATTR may be dotted (`app:services.engine`). A missing module or attribute, or an attribute that
    is not a `tether.Engine`, is a `ConfigError` that says what to pass instead.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"--app {target!r} must be MODULE:ATTR, e.g. --app myapp.engine:engine (a module importable "
            f"from the working directory and the name of its tether.Engine)",
            target=target,
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigError(
                f"--app {target!r}: no module named {module_name!r} importable from {cwd}; run from the "
                f"directory that holds it or install it",
                target=target,
                module=module_name,
            ) from None
        raise ConfigError(
            f"--app {target!r}: importing {module_name!r} failed: it needs the module {missing!r}, "
            f"which is not installed",
            target=target,
            module=module_name,
            missing=missing,
        ) from exc
    obj: object = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(
                f"--app {target!r}: module {module_name!r} has no attribute {attr!r}; name the variable "
                f"that holds your tether.Engine",
                target=target,
                module=module_name,
                attr=attr,
            )
        obj = getattr(obj, part)
    if not isinstance(obj, Engine):
        raise ConfigError(
            f"--app {target!r}: {module_name}.{attr} is a {type(obj).__name__}, not a tether.Engine; "
            f"point --app at the Engine instance (e.g. engine = tether.Engine(...))",
            target=target,
            found=type(obj).__name__,
        )
    return obj
