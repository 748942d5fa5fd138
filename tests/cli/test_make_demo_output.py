"""`make demo` on a fresh clone prints one line per install step, not pip's output, and a failed install still
shows pip's error (issue 44, item 7). The repository's Makefile runs in a scratch copy with a stand-in interpreter
whose venv holds a noisy stand-in pip and `tether`: no network, no real install, nothing in the checkout touched."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = r'''#!/bin/sh
# `python3 -m venv DIR`: a venv whose pip prints what a real install prints, and whose tether prints one line.
[ "$1" = "-m" ] && [ "$2" = "venv" ] || { echo "unexpected: $*" >&2; exit 2; }
mkdir -p "$3/bin"
cat > "$3/bin/pip" <<'EOF'
#!/bin/sh
echo "pip $*" >> "$(dirname "$0")/../pip-calls"
i=0
while [ $i -lt 150 ]; do echo "Collecting package-$i"; i=$((i + 1)); done
echo "WARNING: a warning pip prints even with -q" >&2
if [ -n "$FAIL_INSTALL" ] && [ "${*#*-e}" != "$*" ]; then
  echo "ERROR: No matching distribution found for not-a-package" >&2
  exit 1
fi
EOF
printf '#!/bin/sh\necho "tether demo: ok"\n' > "$3/bin/tether"
chmod +x "$3/bin/pip" "$3/bin/tether"
'''


def make_demo(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`make demo` in a copy of the repository's Makefile (and a pyproject.toml), `PY` the stand-in."""
    work = tmp_path / "clone"
    work.mkdir()
    shutil.copy(ROOT / "Makefile", work / "Makefile")
    (work / "pyproject.toml").write_text("[project]\nname = 'stand-in'\n")
    python = tmp_path / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return subprocess.run(["make", "--no-print-directory", "demo", f"PY={python}"], cwd=work, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", **env})


def test_make_demo_prints_one_line_per_step_and_no_pip_output(tmp_path: Path) -> None:
    done = make_demo(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("==> ")] == [
        f"==> creating .venv with {tmp_path / 'python3'}",
        "==> upgrading pip",
        "==> installing tether with every extra into .venv (a minute or two on a fresh clone)",
        "==> installed",
    ]
    assert lines[-1] == "tether demo: ok" and len(lines) == 5, lines
    assert "Collecting" not in done.stdout + done.stderr and "pip install" not in done.stdout
    assert done.stderr == ""
    calls = (tmp_path / "clone" / ".venv" / "pip-calls").read_text().splitlines()
    assert [c.split()[-1] for c in calls] == ["pip", ".[all,dev]"] and all(" -q " in c for c in calls)
    again = subprocess.run(["make", "--no-print-directory", "demo", f"PY={tmp_path / 'python3'}"],
                           cwd=tmp_path / "clone", capture_output=True, text=True, timeout=120)
    assert again.stdout == "tether demo: ok\n"  # installed once: a second demo goes straight to it


def test_a_failed_install_shows_pips_error_and_stops(tmp_path: Path) -> None:
    done = make_demo(tmp_path, FAIL_INSTALL="1")
    assert done.returncode != 0
    assert "ERROR: No matching distribution found for not-a-package" in done.stderr
    assert "make: installing tether failed (the log is .venv/install.log)" in done.stderr
    assert "tether demo: ok" not in done.stdout and not (tmp_path / "clone" / ".venv" / ".installed").exists()
