"""How the SDK adapters report failure: provider errors as typed stream errors, credentials masked."""

from __future__ import annotations

import base64
import contextlib
import email.utils
import json
import re
import socket
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

from tether.contracts.stream import StreamError

_SECRET = re.compile(
    r"\bsk-(?:ant-)?[A-Za-z0-9][A-Za-z0-9_\-*]{5,}"  # OpenAI and Anthropic keys
    r"|\bAIza[0-9A-Za-z_\-]{20,}"  # Google API keys
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
)
_CONTEXT_HINTS = (
    *("context window", "context length", "context_length_exceeded", "maximum context"),
    *("prompt is too long", "too many tokens", "input is too long", "too many input tokens"),
    *("exceeds the maximum number of tokens", "input token count"),
)
_CONTEXT_CODES = frozenset({"context_length_exceeded", "model_context_window_exceeded"})
"""Structured codes of a context overflow (OpenAI's `code`, and what gateways forward of it): no wording needed.
Anthropic, Bedrock and Gemini send none; their wordings are `_CONTEXT_HINTS` (and google_genai's own)."""
_BILLING_HINTS = (
    *("insufficient_quota", "exceeded your current quota", "credit balance", "billing"),
    *("payment required", "out of credits"),
)
# Error `type`/`code` values of bodies and mid-stream error events -> the HTTP status they mean.
_STATUS_OF_TYPE = (
    (("overloaded_error",), 529),
    (("api_error", "server_error", "internal_error"), 500),
    (("timeout_error",), 504),
    (("rate_limit_error", "rate_limit_exceeded", "requests", "tokens"), 429),
    (("billing_error", "insufficient_quota"), 402),
    (("authentication_error", "invalid_api_key"), 401),
    (("permission_error",), 403),
    (("not_found_error", "model_not_found"), 404),
    (("request_too_large",), 413),
    (("invalid_request_error", "invalid_prompt", "context_length_exceeded"), 400),
)


REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 8
"""Configured values shorter than this are not masked by value (a placeholder such as "unused" is
not a credential, and masking a short word would garble messages); the `sk-` shape still is."""
_SECRET_HEADER = re.compile(r"auth|key|token|secret|password|cookie|signature", re.IGNORECASE)
_SCHEME = re.compile(r"^(?:bearer|basic|token|bot)\s+", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@", re.IGNORECASE)
"""The password of a URL with user info (`https://user:secret@gateway/…`), as an SDK's connection error may print it."""
_BASIC_AUTH = re.compile(r"(\bBasic\s+)[A-Za-z0-9+/]{6,}={0,2}", re.IGNORECASE)
"""An HTTP Basic credential (`Basic base64(user:password)`) as an echoed request header shows it."""


def redact_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with each configured credential (by value, and the forms it takes when echoed: JSON- or
    repr-escaped, URL-encoded), URL passwords and anything shaped like an API key (`sk-…`, `sk-ant-…`,
    Google's `AIza…`, AWS's `AKIA…`) as `[redacted]`."""
    for form in _forms(secrets):
        if form in text:
            text = text.replace(form, REDACTED)
    text = _BASIC_AUTH.sub(rf"\1{REDACTED}", _URL_PASSWORD.sub(rf"\1{REDACTED}@", text))
    return _SECRET.sub(REDACTED, text)


def _forms(secrets: Iterable[str]) -> list[str]:
    """Every way the credentials may appear in an echoed body, longest first (no form masks part of another)."""
    forms: set[str] = set()
    for secret in secrets:
        secret = secret.strip()
        if len(secret) < MIN_SECRET_LENGTH:
            continue
        forms |= {secret, json.dumps(secret)[1:-1], repr(secret)[1:-1], quote(secret, safe=""), quote_plus(secret)}
    return sorted(forms, key=len, reverse=True)


def url_credentials(url: str) -> list[str]:
    """The credentials in a URL's user info, in every form a client sends or an error echoes them: the password
    (as written and decoded), `user:password`, and the HTTP Basic token `base64(user:password)`."""
    parts = urlsplit(url)
    if not parts.password:
        return []
    user, password = unquote(parts.username or ""), unquote(parts.password)
    pair = f"{user}:{password}"
    basic = [base64.b64encode(pair.encode(enc)).decode() for enc in ("utf-8", "latin-1") if _encodes(pair, enc)]
    return list(dict.fromkeys([parts.password, password, pair, *basic]))


def _encodes(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def client_credentials(client: object) -> list[str]:
    """The credentials an SDK client was configured with: its key or token, a password in its base URL,
    the values of the auth headers it sends, and of any default header named like a credential (a
    gateway's own token)."""
    found = [v for v in (getattr(client, "api_key", None), getattr(client, "auth_token", None)) if isinstance(v, str)]
    with contextlib.suppress(ValueError):
        found += url_credentials(str(getattr(client, "base_url", "") or ""))
    headers: dict[str, object] = {}
    with contextlib.suppress(Exception):  # an SDK that cannot build its auth headers holds none to leak
        headers.update(getattr(client, "auth_headers", None) or {})
    custom = getattr(client, "_custom_headers", None)
    if isinstance(custom, Mapping):
        headers.update({k: v for k, v in custom.items() if _SECRET_HEADER.search(str(k))})
    for value in headers.values():
        if isinstance(value, str):
            found += [value, _SCHEME.sub("", value)]
    return found


def parse_retry_after(headers: Mapping[str, str] | None) -> int | None:
    """Milliseconds to wait from `retry-after-ms` or `retry-after` (seconds or an HTTP date)."""
    headers = headers or {}
    for name, scale in (("retry-after-ms", 1.0), ("retry-after", 1000.0)):
        with contextlib.suppress(ValueError, TypeError):
            return max(0, round(float(headers.get(name) or "") * scale))
    with contextlib.suppress(ValueError, TypeError):
        when = email.utils.parsedate_to_datetime(headers.get("retry-after") or "")
        return max(0, round((when.timestamp() - time.time()) * 1000))
    return None


def error_fields(body: object) -> tuple[str | None, str]:
    """(error type or code, message) from any provider error body shape."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping):
            return error_fields(inner)
        kind = body.get("code") or body.get("type")
        if kind == "error":
            kind = None
        message = body.get("message")
        return (str(kind) if kind else None), (str(message) if message else "")
    if isinstance(body, str):
        return None, body
    return None, ""


def _status_of_type(kind: str | None) -> int | None:
    for names, status in _STATUS_OF_TYPE:
        if kind in names:
            return status
    return None


def _as_status(value: object) -> int | None:
    """An HTTP status stated as a number (`400`, `"429"`), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    else:
        return None
    return number if 400 <= number <= 599 else None


def stated_status(body: object) -> int | None:
    """The HTTP status an error body states: a numeric `code`/`status` (OpenRouter, Groq), else its type.

    Gateways report failures that happen after the 200 response inside the stream, as
    `{"error": {"code": 400, ...}}`; what they state, not the 200, says whether a retry can help.
    """
    if not isinstance(body, Mapping):
        return None
    inner = body.get("error")
    if isinstance(inner, Mapping):
        found = stated_status(inner)
        if found is not None:
            return found
    for name in ("code", "status", "status_code"):
        status = _as_status(body.get(name))
        if status is not None:
            return status
    for name in ("code", "type"):
        value = body.get(name)
        status = _status_of_type(value) if isinstance(value, str) else None
        if status is not None:
            return status
    return None


def classify_error(
    provider: str,
    status: int | None,
    *,
    kind: str | None = None,
    message: str = "",
    headers: Mapping[str, str] | None = None,
    key_env: str | None = None,
) -> StreamError:
    """Map an HTTP status / provider error type to the `AgentError` kind and retry class."""
    text = redact_secrets(message.strip()) or "no message"
    hay = f"{kind or ''} {text}".lower()
    if status is None or status < 400:  # a mid-stream error event: its type or code says what it means
        status = _status_of_type(kind) or _as_status(kind)
    shown = f" ({status})" if status else ""

    def err(k: Any, msg: str, retryable: bool = False, after: int | None = None) -> StreamError:
        return StreamError(
            kind=k, message=msg, retryable=retryable, retry_after_ms=after, status=status
        )

    if any(h in hay for h in _BILLING_HINTS) or status == 402:
        return err(
            "terminal",
            f"{provider} quota or credit exhausted{shown}: {text}. Retrying will not help; "
            f"add credit or raise the quota, or route to another model.",
        )
    if kind in _CONTEXT_CODES or ((status in (400, 413, None)) and any(h in hay for h in _CONTEXT_HINTS)):
        return err(
            "context-overflow",
            f"{provider} context window exceeded{shown}: {text}. Shorten the history or the "
            f"tool results, or route to a model with a larger context window.",
        )
    if status in (401, 403):
        hint = f"set {key_env} or pass api_key=" if key_env else "pass a valid api_key="
        return err(
            "terminal",
            f"{provider} rejected the credentials{shown}: {text}. Check the key ({hint}).",
        )
    if status == 429:
        after = parse_retry_after(headers)
        wait = f"; retry after {after} ms" if after is not None else ""
        return err("rate-limit", f"{provider} rate limited{shown}: {text}{wait}", True, after)
    if status is None or status in (408, 409) or status >= 500:
        what = "overloaded" if status == 529 else "transport error"
        return err(
            "transport", f"{provider} {what}{shown}: {text}", True, parse_retry_after(headers)
        )
    return err("terminal", f"{provider} rejected the request{shown}: {text}")


def error_from_exception(
    exc: BaseException,
    provider: str,
    *,
    connection_errors: tuple[type[BaseException], ...] = (),
    key_env: str | None = None,
) -> StreamError:
    """Any exception an SDK (or its HTTP client) raised, as the stream's typed error event."""
    if isinstance(exc, connection_errors) or _is_network_error(exc):
        detail = redact_secrets(str(exc) or type(exc).__name__)
        url = _request_url(exc)
        return StreamError(
            kind="transport",
            message=f"{provider} connection failed{f' ({url})' if url else ''}: {detail}",
            retryable=True,
            reached=not never_sent(exc),
        )
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    if hasattr(exc, "body") or isinstance(status, int):
        kind, message = error_fields(body)
        kind = kind or getattr(exc, "code", None) or getattr(exc, "type", None)
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None) if response is not None else None
        if not isinstance(status, int) or status < 400:  # raised mid-stream, after a 200
            status = stated_status(body)
        return classify_error(
            provider,
            status,
            kind=kind if isinstance(kind, str) else None,
            message=message or str(getattr(exc, "message", "") or exc),
            headers=headers,
            key_env=key_env,
        )
    return StreamError(
        kind="terminal",
        message=f"{provider} adapter failed: {type(exc).__name__}: {redact_secrets(str(exc))}",
    )


def _request_url(exc: BaseException) -> str | None:
    """The URL the failed request went to (the SDKs' connection errors carry their `httpx` request), with
    any credentials in it masked: a query-string key or a `user:password@` part."""
    seen: BaseException | None = exc
    for _ in range(4):  # the error itself, or what it was raised from
        if seen is None:
            return None
        try:
            request = getattr(seen, "request", None)
        except RuntimeError:  # httpx raises when an error has no request attached
            request = None
        url = getattr(request, "url", None) if request is not None else None
        if url is not None:
            bare = url.copy_with(query=None, username=None, password=None) if hasattr(url, "copy_with") else url
            return redact_secrets(str(bare))
        seen = seen.__cause__ or seen.__context__
    return None


def never_sent(exc: BaseException) -> bool:
    """Whether the request never left: somewhere in the exception's causes the connection was refused, the
    name lookup failed, or the client could not connect. A timeout or a dropped connection may have reached
    the provider (and been billed): those are not this."""
    try:
        import httpx2
    except ImportError:  # pragma: no cover - every SDK we wrap ships it
        connect: tuple[type[BaseException], ...] = ()
    else:
        connect = (httpx2.ConnectError,)
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, (ConnectionRefusedError, socket.gaierror, *connect)):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _is_network_error(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    try:
        import httpx2
    except ImportError:  # pragma: no cover - every SDK we wrap ships it
        return False
    return isinstance(exc, httpx2.TransportError | httpx2.StreamError)
