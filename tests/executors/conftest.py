"""Executor tests: make `toolbox` (the tools they dispatch) importable here and in children."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    # Children inherit sys.path through PYTHONPATH, so `toolbox:fn` imports there too.
    sys.path.insert(0, _HERE)
