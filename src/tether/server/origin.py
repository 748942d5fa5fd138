"""Cross-origin defences: which requests count as this server's own page (or a program), and what other
origins' pages may do with its answers.

A page on another origin (another port of the same host counts) can make a browser send simple
requests here: form posts and `text/plain` fetches, with the cookies of this host attached. It can
never read the answers, add a custom header, or send `application/json` without a CORS preflight,
and this server approves none. So a state-changing request must be JSON, carry no foreign
`Origin`/`Sec-Fetch-Site`, and prove it was not a simple request: a same-origin `Origin` (browsers
send one on every POST) or a header only a program or a preflighted page can set (`X-Tether-Request`,
or `Authorization`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.server.routing import ApiError

CLIENT_HEADER = "X-Tether-Request"
"""Any value: a header a page on another origin cannot add without a CORS preflight (which is never approved)."""

ISOLATION_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-frame-options", b"DENY"),  # no other page frames the inspector to click its buttons
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"cross-origin-resource-policy", b"same-origin"),  # nor embeds an answer with <img>/<script>
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)


def header(scope: Scope, name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == name), None)


def foreign(scope: Scope) -> str | None:
    """Why the browser marks this request as sent by another origin's page, or None when it does not."""
    site = header(scope, b"sec-fetch-site")
    if site is not None and site.lower() not in ("same-origin", "none"):
        return f"the browser sent it from another site or origin (Sec-Fetch-Site: {site})"
    origin = header(scope, b"origin")
    if origin is not None:
        own = _authority(scope.get("scheme", "http"), header(scope, b"host") or "")
        if own is None or _authority(*urlsplit(origin)[:2]) != own:
            return f"it comes from a page on {origin!r}, not from this server's own page"
    return None


def _authority(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) with the default port filled in; None for anything but http(s)."""
    if scheme not in ("http", "https") or not netloc:
        return None
    parts = urlsplit(f"{scheme}://{netloc}")
    try:
        port = parts.port
    except ValueError:
        return None
    return scheme, (parts.hostname or "").removesuffix("."), port or (443 if scheme == "https" else 80)


def cookie_usable(scope: Scope) -> bool:
    """The session cookie counts on this server's own requests and on top-level page loads (a link from
    elsewhere opens the inspector); never on a request another origin's page makes with it attached."""
    if foreign(scope) is None:
        return True
    return bool(
        scope["method"] in ("GET", "HEAD")
        and header(scope, b"sec-fetch-mode") == "navigate"
        and header(scope, b"sec-fetch-dest") == "document"
    )


def bodiless(request: Request) -> bool:
    """Whether the request says it has no body (`curl -X POST`): no Content-Length, or 0, and not chunked."""
    length = request.headers.get("content-length")
    return (length is None or length.strip() == "0") and "transfer-encoding" not in request.headers


def check_write(request: Request) -> None:
    """Refuse a state-changing request a page on another origin could have made (raises `ApiError`).

    A body must be JSON; a request with no body (and no Content-Type) has no type to check, and the
    client header below is what tells it from a page's forged post.
    """
    what = f"{request.method} {request.url.path}"
    ctype = request.headers.get("content-type", "")
    if ctype.partition(";")[0].strip().lower() != "application/json" and not (not ctype and bodiless(request)):
        raise ApiError(415, "unsupported-media-type", f"{what} takes only 'Content-Type: application/json' (got "
                       f"{ctype or 'none'!r}): a page on another origin can send form and text/plain posts "
                       f"unasked, so they are refused. Send the body as JSON", content_type=ctype or None)
    why = foreign(request.scope)
    if why is not None:
        raise ApiError(403, "cross-origin", f"{what} refused: {why}. Act from the inspector this server serves, "
                       f"or call the API from a program (which sends no Origin)", origin=request.headers.get("origin"))
    if not any(name in request.headers for name in ("origin", CLIENT_HEADER, "authorization")):
        raise ApiError(403, "client-header-required", f"{what} needs the header '{CLIENT_HEADER}: 1' (or "
                       f"'Authorization'): a header no page on another origin can add unasked, so the request "
                       f"cannot be a forged form post. Add it, e.g. curl -H '{CLIENT_HEADER}: 1'",
                       header=CLIENT_HEADER)


class IsolationHeaders:
    """ASGI middleware: every answer says it may not be framed or embedded by another origin's page."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_isolated(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", ())}
                extra = [(k, v) for k, v in ISOLATION_HEADERS if k not in present]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, send_isolated)
