"""Lazy package exports: a package names each public attribute's module, and imports it on first access.

A package's `__getattr__` (PEP 562) calls `load`, which imports the module, stores the value in the
package's own namespace (so the next access is a plain attribute and `__getattr__` is not called again)
and returns it. That per-package cache is the only state: it is filled from the package's own table,
never changes a value once set, and is what `from package import *` would have left there eagerly.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from typing import Any


def load(package: str, table: Mapping[str, str], name: str, namespace: dict[str, Any]) -> Any:
    """The attribute `name` of `package`: from the module `table` names for it (the module itself when the
    table names `package.name`), else the submodule `package.name` when there is one; else AttributeError."""
    module = table.get(name)
    if module is None:
        if name.startswith("__") or importlib.util.find_spec(f"{package}.{name}") is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = f"{package}.{name}"
    imported = importlib.import_module(module)
    value = imported if module == f"{package}.{name}" else getattr(imported, name)
    namespace[name] = value
    return value


def names(table: Mapping[str, str], namespace: Mapping[str, Any]) -> list[str]:
    """What `dir(package)` lists: what it holds already and every lazy name."""
    return sorted({*namespace, *table})
