"""The typed API under `mypy --strict`: the promised types hold, and misuse is reported."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
MARK = re.compile(r"#\s*error:\s*(.+)$")


def _mypy(*files: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary",
         "--hide-error-context", "--no-pretty", *(str(f.relative_to(ROOT)) for f in files)],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr
    return [line for line in done.stdout.splitlines() if ": error:" in line]


def _file(error: str) -> Path:
    return (ROOT / error.split(":")[0]).resolve()


def test_the_typed_api_passes_mypy_strict_and_misspelled_options_are_reported() -> None:
    typed, misuse = HERE / "typed_api.py", HERE / "misuse.py"
    errors = _mypy(typed, misuse)
    assert errors, "mypy reported nothing at all: the misuse file was not checked"
    assert not [e for e in errors if _file(e) == typed.resolve()], "\n".join(errors)
    expected = {
        n: m.group(1).strip()
        for n, line in enumerate(misuse.read_text().splitlines(), start=1)
        if (m := MARK.search(line))
    }
    found: dict[int, list[str]] = {}
    for e in errors:
        if _file(e) == misuse.resolve():
            line = int(e.split(":")[1])
            found.setdefault(line, []).append(e)
    assert set(found) == set(expected), "\n".join(errors)
    for line, text in expected.items():
        assert any(text in e for e in found[line]), (line, text, found[line])
