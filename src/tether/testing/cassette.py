"""Cassettes: record a model's stream events once, replay them exactly with zero provider calls."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from tether.contracts.errors import ConfigError, TetherError
from tether.contracts.messages import ChatRequest
from tether.contracts.protocols import ChatModel
from tether.contracts.signal import Signal
from tether.contracts.stream import TERMINAL_EVENT_TYPES, ChatEvent, Finish, ModelCaps
from tether.contracts.usage import Usage
from tether.journal.canonical import content_key, to_jsonable
from tether.models._sdk_errors import redact_secrets

Mode = Literal["replay", "record", "auto"]
FORMAT_VERSION = 1
REDACTED = "[redacted]"
_SECRET_KEYS = frozenset({"authorization", "x-api-key", "api_key", "api-key"})


class CassetteMissError(TetherError):
    """Replay mode met a request the cassette does not hold."""

    code = "cassette-miss"


class CassetteUnusedError(TetherError, AssertionError):
    """`assert_all_used()` found recorded exchanges no request replayed."""

    code = "cassette-unused"


@dataclass
class Exchange:
    """One recorded call: its key, the canonical request (for humans) and the stream events."""

    key: str
    request: dict[str, Any]
    events: list[dict[str, Any]]
    used: bool = field(default=False, compare=False)


def request_form(request: ChatRequest) -> dict[str, Any]:
    """The canonical form a cassette keys on: the request minus telemetry (`metadata`).

    Top-level fields still at their default are left out, so a new optional request field
    does not invalidate every recorded cassette.
    """
    form = request.model_dump(mode="json", by_alias=True, exclude={"metadata"})
    for name, info in ChatRequest.model_fields.items():
        key = info.alias or name
        if not info.is_required() and key in form:
            default = info.get_default(call_default_factory=True)
            if form[key] == to_jsonable(default):
                del form[key]
    return form


def request_key(request: ChatRequest) -> str:
    return content_key(request_form(request))


def redact(value: Any, secrets: Sequence[str] = ()) -> Any:
    """A copy of `value` with the given credentials (by value), API-key-looking strings and
    credential-named fields replaced."""
    if isinstance(value, dict):
        return {
            k: REDACTED if str(k).lower() in _SECRET_KEYS else redact(v, secrets) for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v, secrets) for v in value]
    if isinstance(value, str):
        return redact_secrets(value, secrets)
    return value


def credentials_of(model: ChatModel) -> list[str]:
    """The credentials `model` says it was configured with (an SDK adapter's `credentials()`), else none."""
    found = getattr(model, "credentials", None)
    secrets = found() if callable(found) else ()
    return [s for s in secrets if isinstance(s, str)]


class CassetteModel:
    """Wraps a `ChatModel`: same `id`, `family` and `caps`; streams come from the cassette file."""

    def __init__(self, model: ChatModel, path: str | os.PathLike[str], mode: Mode = "replay"):
        if mode not in ("replay", "record", "auto"):
            raise ConfigError(f"cassette mode must be 'replay', 'record' or 'auto', not {mode!r}")
        self.inner = model
        self.id = model.id
        self.family = model.family
        self.path = Path(path)
        self.mode: Mode = mode
        self.recorded = 0
        self.replayed = 0
        self._events: TypeAdapter[ChatEvent] = TypeAdapter(ChatEvent)
        self._exchanges: list[Exchange] = [] if mode == "record" else self._load()
        self._served: dict[str, int] = {}

    def caps(self, model: str) -> ModelCaps:
        return self.inner.caps(model)

    @property
    def exchanges(self) -> list[Exchange]:
        return list(self._exchanges)

    def unused(self) -> list[Exchange]:
        """Exchanges in the file that no request has replayed (or recorded) in this session."""
        return [e for e in self._exchanges if not e.used]

    def assert_all_used(self) -> None:
        """Raise `CassetteUnusedError` listing every exchange never replayed."""
        left = self.unused()
        if left:
            lines = "; ".join(f"{e.key[:12]} ({_summary(e.request)})" for e in left)
            raise CassetteUnusedError(
                f"cassette {self.path} has {len(left)} unused exchange(s): {lines}. Delete them "
                f"by re-recording with mode='record', or check the test still makes these calls.",
                path=str(self.path),
                keys=[e.key for e in left],
            )

    async def stream(
        self, request: ChatRequest, signal: Signal | None = None
    ) -> AsyncIterator[ChatEvent]:
        key = request_key(request)
        hit = None if self.mode == "record" else self._lookup(key)
        if hit is not None:
            async for event in self._replay(hit, signal):
                yield event
            return
        if self.mode == "replay":
            raise CassetteMissError(
                f"cassette {self.path} has no exchange for this request (key {key[:12]}, "
                f"{_summary(request_form(request))}). Re-record with mode='record' "
                f"(or mode='auto' to record only what is missing).",
                path=str(self.path),
                key=key,
            )
        async for event in self._record(key, request, signal):
            yield event

    def _lookup(self, key: str) -> Exchange | None:
        """The n-th request with a key gets the n-th exchange with it (past the end: the last)."""
        matches = [e for e in self._exchanges if e.key == key]
        if not matches:
            return None
        n = self._served.get(key, 0)
        self._served[key] = n + 1
        return matches[min(n, len(matches) - 1)]

    async def _replay(self, exchange: Exchange, signal: Signal | None) -> AsyncIterator[ChatEvent]:
        exchange.used = True
        self.replayed += 1
        usage = Usage()
        for raw in exchange.events:
            if signal is not None and signal.aborted:
                yield Finish(
                    reason="cancelled", usage=usage.model_copy(update={"approximate": True})
                )
                return
            try:
                event = self._events.validate_python(raw)
            except ValidationError as exc:  # an edited or damaged file: refuse it, never replay a credit
                raise ConfigError(
                    f"cassette {self.path} holds an invalid stream event for exchange {exchange.key[:12]} "
                    f"({exc.errors()[0]['msg']} at {'.'.join(map(str, exc.errors()[0]['loc']))}); re-record it with "
                    f"mode='record'.",
                    path=str(self.path), key=exchange.key,
                ) from None
            if event.type == "usage":
                usage = usage + event.usage
            yield event

    async def _record(
        self, key: str, request: ChatRequest, signal: Signal | None
    ) -> AsyncIterator[ChatEvent]:
        events: list[dict[str, Any]] = []
        async for event in self.inner.stream(request, signal):
            events.append(event.model_dump(mode="json"))
            if event.type in TERMINAL_EVENT_TYPES:
                # Saved before the terminal is yielded: a consumer stops (and closes us) right there.
                self._keep(key, request, events)
                yield event
                return
            yield event
        # No terminal: the model broke protocol; keep nothing half-recorded.

    def _keep(self, key: str, request: ChatRequest, events: list[dict[str, Any]]) -> None:
        if events[-1].get("reason") == "cancelled":
            return  # a cut stream is not what the provider would answer next time
        secrets = credentials_of(self.inner)  # by value: a gateway token has no `sk-` shape to spot
        exchange = Exchange(key=key, request=redact(request_form(request), secrets), events=redact(events, secrets))
        exchange.used = True
        self._exchanges.append(exchange)
        self._served[key] = sum(1 for e in self._exchanges if e.key == key)
        self.recorded += 1
        self._save()

    def _load(self) -> list[Exchange]:
        if not self.path.exists():
            return []
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
            return [
                Exchange(key=e["key"], request=e["request"], events=e["events"])
                for e in doc["exchanges"]
            ]
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"cassette {self.path} is not a tether cassette ({exc}). Delete it and re-record "
                f"with mode='record'.",
                path=str(self.path),
            ) from None

    def _save(self) -> None:
        """Write the whole cassette atomically (temp file in the same directory, then rename)."""
        doc = {
            "version": FORMAT_VERSION,
            "exchanges": [
                {"key": e.key, "request": e.request, "events": e.events} for e in self._exchanges
            ],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1, sort_keys=True, ensure_ascii=False)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _summary(request: dict[str, Any]) -> str:
    messages = request.get("messages") or []
    last = messages[-1] if messages else {}
    text = " ".join(p.get("text", "") for p in last.get("parts", ()) if isinstance(p, dict))
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"model {request.get('model')!r}, {len(messages)} message(s), last {text!r}"


def cassette(
    model: ChatModel, path: str | os.PathLike[str], mode: Mode = "replay"
) -> CassetteModel:
    """Wrap `model` so its calls replay from (or record to) the cassette at `path`."""
    return CassetteModel(model, path, mode)


REPLAY_ONLY_KEY = "replay-only"
"""The key a replay-only adapter is built with: a replayed cassette never reaches the provider."""


def fixture_cassette(
    model: ChatModel | Callable[..., ChatModel], path: str | os.PathLike[str], mode: Mode | None = None
) -> CassetteModel:
    """A cassette whose mode follows the file: replay when `path` exists, record when it does not and
    the adapter has its key, else a `ConfigError` naming the file and the key to set.

    `model` may be an adapter factory (`tether.models.anthropic`): it is called with no arguments, and
    when that fails for want of a key, with a placeholder key, which is all a replay needs.
    """
    where = Path(path)
    adapter, missing_key = _adapter(model)
    if mode is None:
        mode = "replay" if where.exists() else "record"
    if mode != "replay" and missing_key is not None:
        state = "does not exist" if not where.exists() else f"is opened with mode={mode!r}"
        raise ConfigError(
            f"cassette {where} {state} and there is no API key to record it with: set {missing_key} and run the "
            f"test once to record it, then commit the file (replays need no key)",
            path=str(where), env=missing_key,
        )
    return CassetteModel(adapter, where, mode)


def _adapter(model: ChatModel | Callable[..., ChatModel]) -> tuple[ChatModel, str | None]:
    """The adapter, and the env var of the key it lacks (None when it has one or needs none)."""
    if isinstance(model, ChatModel) and not isinstance(model, type):
        return model, None
    try:
        return model(), None
    except ConfigError as exc:
        env = exc.data.get("env")
        if not env:
            raise
        return model(api_key=REPLAY_ONLY_KEY), str(env)
