"""Input calibration: how many more input tokens a model bills than tether's chars/4 estimate, per run.

The clamp, the exposure hold, the default admission reserve and a dispatch's priced worst case all
start from an input *estimate*. A provider that bills more (a hidden system prompt, tool-use
preambles, a denser tokenizer) would make each of them too small, and a crash would then under-charge
every call it cut off. So every settled call teaches the run its overhead per model, `billed -
estimated` input tokens (the largest seen, never negative), and later estimates add it. The overhead
is additive, not a ratio: a short prompt billed with a fixed hidden preamble must not inflate the
estimate of a long one. Each dispatch record journals the overhead it used and each turn's draw the
overheads learned so far, so a resumed segment starts from what earlier segments learned.
"""

from __future__ import annotations

from collections.abc import Iterable

from tether.contracts.entries import JournalEntry


class InputCalibration:
    """Per-model input overhead in tokens (0 until a call bills more input than estimated)."""

    def __init__(self, overheads: dict[str, int] | None = None) -> None:
        self.overheads: dict[str, int] = dict(overheads or {})

    @classmethod
    def from_journal(cls, entries: Iterable[JournalEntry]) -> InputCalibration:
        """The overheads the run's dispatch records and turn draws carry (the largest per model)."""
        found = cls()
        for e in entries:
            if e.kind == "decision" and isinstance(e.value, dict) and e.value.get("decision") == "dispatch":
                found.learn(e.value.get("model"), e.value.get("input_overhead"))
            elif e.kind == "tree" and isinstance(learned := e.input_overhead, dict):
                for model, overhead in learned.items():
                    found.learn(model, overhead)
        return found

    def learn(self, model: object, extra: object) -> None:
        """Keep `extra` as `model`'s overhead when it is larger than the one known (anything else is ignored)."""
        if isinstance(model, str) and isinstance(extra, int) and extra > self.overheads.get(model, 0):
            self.overheads[model] = extra

    def overhead(self, model: str) -> int:
        return self.overheads.get(model, 0)

    def scale(self, model: str, est_input: int) -> int:
        """`est_input` as this run has seen `model` bill it."""
        return est_input + self.overheads.get(model, 0)

    def observe(self, model: str, est_input: int, billed_input: int) -> None:
        """Learn from a call estimated at `est_input` that billed `billed_input` input tokens."""
        if est_input > 0 and billed_input - est_input > self.overheads.get(model, 0):
            self.overheads[model] = billed_input - est_input
