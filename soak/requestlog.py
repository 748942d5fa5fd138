"""The request log: every effect a provider or the host saw, written by the process that performed it.

Each child process appends to one shared file opened with O_APPEND and writes each JSON line with a single
write(2), so lines from concurrent processes never interleave and a SIGKILL never leaves half a line in
the middle of the file (a torn last line is ignored when reading).

Every effect carries a *tag* (`#r:` a model reply, `#t:` a tool result, `#s:` a step result) that the effect
also writes into its output. The output is what the engine journals or checkpoints, so "this effect's
completion is durable" is exactly "its tag appears in the store" (see `soak.checks`).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from tether.agents.dispatch import estimate_input_tokens
from tether.contracts.messages import ChatRequest
from tether.contracts.prices import Price
from tether.contracts.signal import Signal
from tether.contracts.stream import ChatEvent, Finish, ModelCaps, StreamError, UsageDelta
from tether.contracts.usage import Usage
from tether.journal.canonical import content_key
from tether.models.fake import FakeModel, Reply, estimate_tokens
from tether.pricing import cost_usd
from tether.testing.cassette import request_form

TagKind = Literal["r", "t", "s"]
TAG = re.compile(r"#[rts]:[0-9a-f]{16}")


def tag(kind: TagKind, *parts: object) -> str:
    """A short, deterministic tag for an effect, from what identifies it."""
    digest = hashlib.sha256(repr(parts).encode()).hexdigest()
    return f"#{kind}:{digest[:16]}"


def request_identity(request: ChatRequest) -> str:
    """What makes two requests "the same call": the cassette key without the per-turn output clamp.

    The clamp (`max_output_tokens`) follows the remaining budget, so a resumed run may ask for the same
    turn with a different cap; it is still the same call, and paying for it twice is still paying twice.
    """
    return content_key(request_form(request.model_copy(update={"max_output_tokens": None})))


def thread_of(request: ChatRequest) -> str:
    """The agent a request belongs to: its first user message (every soak agent has a unique prompt)."""
    first = next((m.text_content for m in request.messages if m.role == "user"), "")
    return hashlib.sha256(first.encode()).hexdigest()[:16]


class _Line(BaseModel):
    model_config = ConfigDict(frozen=True)

    run: str
    segment: int
    """The driver's number for the child process (1 = the first `engine.run`)."""


class Sent(_Line):
    """A request the fake model received, logged before any reply byte."""

    event: Literal["sent"] = "sent"
    n: int
    """The request's number in its segment; pairs it with its `Done` line."""
    id: str
    """`request_identity` of the request."""
    thread: str
    model: str
    input_tokens: int
    """What the provider bills as input for this request."""
    max_output_tokens: int
    """The request's output cap (the model's own cap when the request set none)."""
    worst_usd: float
    """The priced worst case: the input plus the whole output cap."""
    unestimated_usd: float = 0.0
    """The price of the input billed beyond the engine's own estimate of the request (the hard ceiling's stated
    assumption: a worst case the engine priced can miss only this)."""

    @property
    def tag(self) -> str:
        return tag("r", self.id)


class Done(_Line):
    """The end of a reply (finished, failed, cut or abandoned by the engine) with the usage it billed."""

    event: Literal["done"] = "done"
    n: int
    id: str
    input_tokens: int
    output_tokens: int
    usd: float
    finish: str


class Effect(_Line):
    """A tool or step body that ran."""

    event: Literal["effect"] = "effect"
    kind: Literal["tool", "step"]
    name: str
    tag: str


LogLine = Annotated[Sent | Done | Effect, Field(discriminator="event")]
_LINE: TypeAdapter[Sent | Done | Effect] = TypeAdapter(LogLine)


class RequestLog:
    """The writer one child process holds: its run, its segment number, and the shared file."""

    def __init__(self, path: str | Path, *, run: str, segment: int) -> None:
        self.run = run
        self.segment = segment
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._requests = 0

    def write(self, line: Sent | Done | Effect) -> None:
        os.write(self._fd, line.model_dump_json().encode() + b"\n")  # one write(2): atomic under O_APPEND

    def next_request(self) -> int:
        self._requests += 1
        return self._requests

    def effect(self, kind: Literal["tool", "step"], name: str, effect_tag: str) -> None:
        self.write(Effect(run=self.run, segment=self.segment, kind=kind, name=name, tag=effect_tag))

    def close(self) -> None:
        os.close(self._fd)


class LogReader:
    """Reads the shared log as it grows and hands out each run's lines once that run has settled."""

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._offset = 0
        self._by_run: dict[str, list[Sent | Done | Effect]] = defaultdict(list)

    def take(self, run: str) -> list[Sent | Done | Effect]:
        """The run's lines in file order (call once its processes are gone: nothing more will come)."""
        self._read_new()
        return self._by_run.pop(run, [])

    def _read_new(self) -> None:
        if not self._path.exists():
            return
        with open(self._path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        self._offset += end
        for raw in data[:end].splitlines():
            try:
                line = _LINE.validate_json(raw)
            except ValidationError:
                continue  # a line torn by a kill
            self._by_run[line.run].append(line)


class LoggingFake:
    """The fake model (`tether.models.fake`) with a request log: logs what it receives and what it bills.

    `script` must be a pure function of the request; it is asked once here (to log the billed input
    before any latency) and once by the fake model that plays the reply.
    """

    def __init__(
        self, script: Callable[[ChatRequest], Reply], *, model: str, price: Price, log: RequestLog
    ) -> None:
        self._inner = FakeModel("fake", script, prices={model: price})
        self._script = script
        self._price = price
        self._log = log
        self.id = self._inner.id
        self.family = self._inner.family

    def caps(self, model: str) -> ModelCaps:
        return self._inner.caps(model)

    async def stream(self, request: ChatRequest, signal: Signal | None = None) -> AsyncIterator[ChatEvent]:
        log, reply = self._log, self._script(request)
        n, ident = log.next_request(), request_identity(request)
        input_tokens = reply.input_tokens if reply.input_tokens is not None else estimate_tokens(request)
        cap = request.max_output_tokens or self.caps(request.model).max_output_tokens
        worst = cost_usd(Usage(input_tokens=input_tokens, output_tokens=cap), self._price)
        unforeseen = max(0, input_tokens - estimate_input_tokens(request))
        log.write(Sent(run=log.run, segment=log.segment, n=n, id=ident, thread=thread_of(request),
                       model=request.model, input_tokens=input_tokens, max_output_tokens=cap, worst_usd=worst,
                       unestimated_usd=cost_usd(Usage(input_tokens=unforeseen), self._price)))
        billed, finish = Usage(), "abandoned"  # "abandoned": the engine stopped reading before the end
        try:
            async for event in self._inner.stream(request, signal):
                if isinstance(event, UsageDelta):
                    billed = billed + event.usage
                elif isinstance(event, Finish):
                    billed, finish = event.usage, event.reason
                elif isinstance(event, StreamError):
                    finish = f"error:{event.kind}"
                yield event
        finally:
            log.write(Done(run=log.run, segment=log.segment, n=n, id=ident, input_tokens=billed.input_tokens,
                           output_tokens=billed.output_tokens, usd=cost_usd(billed, self._price), finish=finish))
