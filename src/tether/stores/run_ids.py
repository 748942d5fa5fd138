"""The one rule for run ids, which every store enforces before it writes anything for a run.

One rule for all stores, so a run id that works on one works on every other (a journal can move
between stores): at most `MAX_RUN_ID_BYTES` bytes of UTF-8, and nothing that cannot be a file name
(the JSONL store names files after runs) or a PostgreSQL text value (which cannot hold NUL).
"""

from __future__ import annotations

import re
from functools import lru_cache

from tether.contracts.errors import ConfigError

MAX_RUN_ID_BYTES = 200
"""The longest run id, in UTF-8 bytes (200 ASCII characters): with the JSONL store's longest file name
around it (`.<id>.meta.json.<pid>.<tag>.tmp`) a name stays under the 255 bytes file systems allow."""

_UNSAFE = re.compile(r"[\x00-\x1f\x7f/\\]")
_RULE = (
    f"a run id is 1 to {MAX_RUN_ID_BYTES} bytes of UTF-8 ({MAX_RUN_ID_BYTES} ASCII characters) with no "
    f"control characters, '/' or '\\', does not start with '.' and does not end in '.effects'"
)


@lru_cache(maxsize=4096)
def check_run_id(run_id: str) -> None:
    """Raise `ConfigError` unless `run_id` follows the rule (valid ids are remembered: this runs per append)."""
    why = _problem(run_id)
    if why is not None:
        text = run_id if isinstance(run_id, str) else repr(run_id)
        shown = repr(text) if len(text) <= 60 else f"{text[:40]!r}… ({len(text)} characters)"
        raise ConfigError(
            f"run id {shown} {why}; nothing was written. {_RULE[0].upper()}{_RULE[1:]}. Choose "
            f"another run id (the default, a ULID, always fits; hash a longer key down to one).",
            run_id=text[:MAX_RUN_ID_BYTES].encode("utf-8", "backslashreplace").decode(),
            limit=MAX_RUN_ID_BYTES,
        )


def _problem(run_id: object) -> str | None:
    if not isinstance(run_id, str):
        return f"is not a string (a {type(run_id).__name__})"
    if not run_id:
        return "is empty"
    try:
        size = len(run_id.encode())
    except UnicodeEncodeError:
        return "is not valid Unicode (it holds a lone surrogate)"
    if size > MAX_RUN_ID_BYTES:
        return f"is {size} bytes long, over the limit of {MAX_RUN_ID_BYTES}"
    bad = _UNSAFE.search(run_id)
    if bad is not None:
        return f"contains {bad.group()!r} at position {bad.start()}"
    if run_id.startswith("."):
        return "starts with '.'"
    if run_id.endswith(".effects"):
        return "ends in '.effects' (the JSONL store keeps each run's effect ledger in <run id>.effects.jsonl)"
    return None
