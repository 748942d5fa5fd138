"""`import tether` is cheap and complete: it imports no part of the engine until a name is used, and every
public name (`tether.__all__`, `tether.contracts.__all__`) resolves, in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tether


def _fresh(code: str) -> object:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_importing_tether_imports_nothing_but_its_front_door() -> None:
    loaded = _fresh("import json, sys, tether; print(json.dumps(sorted(m for m in sys.modules if m.startswith(("
                    "'tether', 'pydantic', 'typer', 'rich', 'msgspec')))))")
    assert loaded == ["tether", "tether._lazy"]


@pytest.mark.parametrize("package", ["tether", "tether.contracts"])
def test_every_public_name_resolves_in_a_fresh_process(package: str) -> None:
    found = _fresh(f"import importlib, json; p = importlib.import_module({package!r}); "
                   f"print(json.dumps({{n: type(getattr(p, n)).__name__ for n in p.__all__}}))")
    assert isinstance(found, dict) and len(found) == len(importlib_all(package))
    assert "NoneType" not in found.values()


def importlib_all(package: str) -> list[str]:
    import importlib

    return list(importlib.import_module(package).__all__)


def test_public_names_are_the_objects_their_modules_define() -> None:
    from tether.engine.engine import Engine
    from tether.engine.workflow import workflow
    from tether.tools.definition import tool

    assert (tether.Engine, tether.workflow, tether.tool) == (Engine, workflow, tool)
    assert tether.models.__name__ == "tether.models" and tether.testing.__name__ == "tether.testing"
    assert set(tether.__all__) <= set(dir(tether))
    assert tether.contracts.ChatRequest.__name__ == "ChatRequest"  # a submodule, as an attribute


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Engin'"):
        _ = tether.Engin
    assert not hasattr(tether, "__wrapped__")
