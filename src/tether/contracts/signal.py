"""A cancellation signal shared by a budget account, a run and the streams under them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

from tether.contracts.stops import StopReason


class Signal:
    """Fires once with a reason; listeners and waiters learn of it (Python's AbortSignal).

    A budget account's signal also carries a typed `cause` (which ceiling fired), passed on by `Signal.any`.
    """

    __slots__ = ("_cause", "_event", "_listeners", "_next", "_reason")

    def __init__(self) -> None:
        self._reason: str | None = None
        self._cause: StopReason | None = None
        self._event: asyncio.Event | None = None
        # By subscription number: thousands of in-flight calls subscribe and leave, each in O(1).
        self._listeners: dict[int, Callable[[str], None]] = {}
        self._next = 0

    @property
    def aborted(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        return self._reason

    @property
    def cause(self) -> StopReason | None:
        """Which ceiling fired the signal (None: a cancellation, or not fired)."""
        return self._cause

    def abort(self, reason: str, cause: StopReason | None = None) -> None:
        if self._reason is not None:
            return
        self._reason = reason
        self._cause = cause
        if self._event is not None:
            self._event.set()
        for cb in list(self._listeners.values()):
            cb(reason)

    def __call__(self, reason: str) -> None:
        """A signal listens to another as itself (`other.listen(signal)`): no bound `abort` made per subscription."""
        self.abort(reason)

    def add_listener(self, cb: Callable[[str], None]) -> Callable[[], None]:
        """Call `cb(reason)` when the signal fires (at once if it already has); returns an unsubscriber."""
        if self._reason is not None:
            cb(self._reason)
            return lambda: None
        token = self._next
        self._next += 1
        self._listeners[token] = cb
        return partial(_drop, self._listeners, token)  # one object per subscription, not a closure

    def listen(self, cb: Callable[[str], None]) -> int:
        """`add_listener` without an unsubscriber object: returns the token `unlisten` takes (-1 when the signal
        had fired already: `cb` was called at once). For per-call subscriptions held while many calls are in
        flight: an int is nothing the cycle collector tracks."""
        if self._reason is not None:
            cb(self._reason)
            return -1
        token = self._next
        self._next += 1
        self._listeners[token] = cb
        return token

    def unlisten(self, token: int) -> None:
        self._listeners.pop(token, None)

    async def wait(self) -> str:
        if self._event is None:
            self._event = asyncio.Event()
            if self._reason is not None:
                self._event.set()
        await self._event.wait()
        assert self._reason is not None
        return self._reason

    @staticmethod
    def any(*signals: Signal | None) -> Signal:
        """A signal that fires when any of `signals` fires."""
        combined = Signal()
        for s in signals:
            if s is not None:
                s.add_listener(partial(_forward, combined, s))
        return combined


def _forward(combined: Signal, source: Signal, reason: str) -> None:
    combined.abort(reason, source.cause)


def _drop(listeners: dict[int, Callable[[str], None]], token: int) -> None:
    listeners.pop(token, None)
