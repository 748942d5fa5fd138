"""USD accounts: a run account with an optional ceiling, child sub-accounts, and held reserves."""

from __future__ import annotations

from tether.contracts.signal import Signal

DEFAULT_CHILD_FRACTION = 0.3
EPSILON = 1e-12


class Hold:
    """A reserve held on an account chain until the invocation settles; spend consumes it first."""

    def __init__(self, account: Account, amount: float) -> None:
        self.account = account
        self.amount = amount
        self.left = amount
        for acct in account.chain():
            acct.held += amount

    def consume(self, usd: float) -> None:
        take = min(self.left, max(0.0, usd))
        self.left -= take
        for acct in self.account.chain():
            acct.held -= take

    def release(self) -> None:
        self.consume(self.left)


class Account:
    """Spend against a ceiling fixed for the segment; every debit propagates to every ancestor."""

    def __init__(self, ceiling: float | None, parent: Account | None = None, *, name: str = "run") -> None:
        self.ceiling = ceiling
        self.parent = parent
        self.name = name
        self.spent = 0.0
        self.held = 0.0
        self.signal: Signal = Signal() if parent is None else Signal.any(parent.signal)
        self.stopped: str | None = None
        """Why this account's ceiling stopped work (a refusal, a cut, a halt); None while it has not."""

    def chain(self) -> list[Account]:
        """This account and its ancestors, innermost first."""
        out: list[Account] = []
        acct: Account | None = self
        while acct is not None:
            out.append(acct)
            acct = acct.parent
        return out

    def capped(self) -> list[Account]:
        return [a for a in self.chain() if a.ceiling is not None]

    def debit(self, usd: float) -> None:
        """Record spend on the whole chain; an account reaching its ceiling fires its signal (layer 3)."""
        for acct in self.chain():
            acct.spent += usd
            if acct.at_ceiling():
                acct.signal.abort(f"ceiling reached: {acct.name!r} at {acct.spent:.6f} of {acct.ceiling}")

    def at_ceiling(self) -> bool:
        return self.ceiling is not None and self.spent >= self.ceiling - EPSILON

    def stop(self, reason: str) -> None:
        """Record that this account's own ceiling stopped work (the first reason is kept)."""
        if self.stopped is None:
            self.stopped = reason

    @property
    def exhausted(self) -> bool:
        """True once this account's ceiling stopped work or was reached: the scope settles `exhausted`."""
        return self.stopped is not None or self.at_ceiling()

    def binding(self) -> Account | None:
        """The capped account on the chain with the least room: the ceiling that limits this one."""
        capped = self.capped()
        if not capped:
            return None
        return min(capped, key=lambda a: (a.ceiling or 0.0) - a.spent - a.held)

    def restore(self, usd: float) -> None:
        """Spend folded from the journal at segment start (this account only)."""
        self.spent += usd

    def hold(self, amount: float) -> Hold:
        return Hold(self, amount)

    def room(self, own: Hold | None = None) -> float | None:
        """Headroom of the tightest capped account, net of other invocations' held reserves."""
        mine = own.left if own is not None else 0.0
        rooms = [a.ceiling - a.spent - a.held + mine for a in self.capped() if a.ceiling is not None]
        return max(0.0, min(rooms)) if rooms else None

    def remaining(self) -> float | None:
        """Headroom of the tightest capped account on the chain, net of held reserves."""
        return self.room()

    def child(self, fraction: float | None, *, name: str, ceiling: float | None = None) -> Account:
        """A sub-account: `fraction` (default 0.3) of this chain's remainder, or a journaled ceiling."""
        if ceiling is None:
            room = self.remaining()
            if room is not None:
                ceiling = room * (DEFAULT_CHILD_FRACTION if fraction is None else fraction)
        return Account(ceiling, self, name=name)
