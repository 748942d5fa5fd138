"""The built wheel ships the inspector: every file under src/tether/server/static, byte for byte."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[2]
STATIC = ROOT / "src" / "tether" / "server" / "static"


def test_the_wheel_ships_every_inspector_static_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = tmp_path.glob("tether-*.whl")
    sources = {f"tether/server/static/{p.relative_to(STATIC).as_posix()}": p for p in STATIC.rglob("*") if p.is_file()}
    assert {"tether/server/static/index.html", "tether/server/static/app.js", "tether/server/static/app.css"} <= set(sources)
    with zipfile.ZipFile(wheel) as whl:
        shipped = {n for n in whl.namelist() if n.startswith("tether/server/static/")}
        assert shipped == set(sources)
        for name, path in sources.items():
            assert whl.read(name) == path.read_bytes(), name
