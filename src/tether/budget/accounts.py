"""USD accounts: a run account with an optional ceiling and child-workflow sub-accounts under it."""

from __future__ import annotations

from tether.contracts.signal import Signal

DEFAULT_CHILD_FRACTION = 0.3


class Account:
    """Spend against a ceiling fixed for the segment; every debit propagates to every ancestor."""

    def __init__(self, ceiling: float | None, parent: Account | None = None, *, name: str = "run") -> None:
        self.ceiling = ceiling
        self.parent = parent
        self.name = name
        self.spent = 0.0
        self.held = 0.0
        self.signal: Signal = Signal() if parent is None else Signal.any(parent.signal)

    def chain(self) -> list[Account]:
        """This account and its ancestors, innermost first."""
        out: list[Account] = []
        acct: Account | None = self
        while acct is not None:
            out.append(acct)
            acct = acct.parent
        return out

    def debit(self, usd: float) -> None:
        for acct in self.chain():
            acct.spent += usd
            if acct.ceiling is not None and acct.spent >= acct.ceiling - 1e-12:
                acct.signal.abort("budget")

    def restore(self, usd: float) -> None:
        """Spend folded from the journal at segment start (this account only)."""
        self.spent += usd

    def remaining(self) -> float | None:
        """Headroom of the tightest capped account on the chain, net of held reserves."""
        rooms = [a.ceiling - a.spent - a.held for a in self.chain() if a.ceiling is not None]
        return max(0.0, min(rooms)) if rooms else None

    def child(self, fraction: float | None, *, name: str, ceiling: float | None = None) -> Account:
        """A sub-account: `fraction` (default 0.3) of this chain's remainder, or a journaled ceiling."""
        if ceiling is None:
            room = self.remaining()
            if room is not None:
                ceiling = room * (DEFAULT_CHILD_FRACTION if fraction is None else fraction)
            elif fraction is not None and self.ceiling is not None:
                ceiling = self.ceiling * fraction
        return Account(ceiling, self, name=name)
