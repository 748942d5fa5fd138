"""Typed stop reasons (issue 40, item 5): journaled values decide replay; old journals' wordings map once."""

from __future__ import annotations

import pytest

from tether import StopReason
from tether.contracts.entries import JournalEntry
from tether.contracts.signal import Signal
from tether.journal.disposition import ceiling_stopped
from tether.journal.stops import error_stop_reason, legacy_stop_reason


def _terminal(error: dict[str, object], status: str = "cancelled") -> JournalEntry:
    return JournalEntry(kind="agent", scope="/", key="k", ordinal=0, status=status, seq=9, error=error)


@pytest.mark.parametrize(("message", "meant"), [
    ("in-flight exposure cap: spent 0.1 + in flight 0.2 + this turn 0.3 USD would pass", StopReason.EXPOSURE_CAP),
    ("stream cut by the budget: provider cancelled", StopReason.PROVIDER_CANCELLED),
    ("tree token ceiling reached: 510 of 500 tokens drawn; no further turn", StopReason.TOKEN_CEILING),
    ("stream cut by the budget: ceiling reached: 'tree tokens' at 512 of 500", StopReason.TOKEN_CEILING),
    ("budget exhausted: scope 'team' has charged 1.0 of 1.0 USD", StopReason.TENANT_BUDGET),
    ("stream cut by the budget: ceiling reached: 'run' at 0.05 of 0.05", StopReason.USD_CEILING),
    ("budget exhausted: account 'run' has spent 0.0500 of 0.0500 USD", StopReason.USD_CEILING),
])
def test_an_old_journal_s_wording_maps_to_the_reason_it_meant(message: str, meant: StopReason) -> None:
    assert legacy_stop_reason(message) is meant
    assert error_stop_reason({"kind": "budget", "message": message}) is meant


def test_a_typed_reason_wins_over_any_wording() -> None:
    # A journaled reason decides, whatever the message says: rewording never changes replay.
    err = {"kind": "budget", "reason": "exposure-cap", "message": "budget exhausted: account 'run' is at its ceiling"}
    assert error_stop_reason(err) is StopReason.EXPOSURE_CAP
    assert not ceiling_stopped(_terminal(err))
    reworded = {"kind": "budget", "reason": "usd-ceiling", "message": "in-flight exposure cap (reworded)"}
    assert ceiling_stopped(_terminal(reworded))


def test_only_ceilings_are_ceiling_stops() -> None:
    stops = {r for r in StopReason if r.is_ceiling}
    assert stops == {StopReason.USD_CEILING, StopReason.TOKEN_CEILING, StopReason.TENANT_BUDGET,
                     StopReason.OUTPUT_FLOOR, StopReason.SESSION_CEILING}
    assert error_stop_reason({"kind": "transport", "message": "tree token ceiling"}) is None
    assert StopReason.parse("output-floor") is StopReason.OUTPUT_FLOOR and StopReason.parse("nope") is None


def test_a_fired_account_signal_passes_its_cause_through_any() -> None:
    tokens, usd = Signal(), Signal()
    combined = Signal.any(usd, tokens)
    tokens.abort("ceiling reached: 'tree tokens'", StopReason.TOKEN_CEILING)
    assert combined.aborted and combined.cause is StopReason.TOKEN_CEILING
