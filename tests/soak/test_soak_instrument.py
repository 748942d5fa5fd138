"""The soak's own check: it must catch a resume that pays again for turns it had journaled."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_soak_catches_a_resume_that_pays_again_for_checkpointed_turns(tmp_path: Path) -> None:
    out = tmp_path / "verdicts.json"
    proc = subprocess.run(
        [sys.executable, "-m", "soak", "--stores", "sqlite", "--scenarios", "pipeline", "--kills", "6",
         "--seed", "3", "--jobs", "1", "--sabotage", "forget-checkpoints", "--workdir", str(tmp_path / "work"),
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    [store] = json.loads(out.read_text())
    found = {x["check"] for v in store["verdicts"] for x in v["violations"]}
    assert proc.returncode == 1, proc.stdout
    assert "a" in found, proc.stdout  # a checkpointed turn, sent again after the kill
    assert "journaled effects performed again" in proc.stdout
