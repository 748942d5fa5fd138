"""The token gate: loopback-only without a token; with one, every route but `GET /healthz` needs it.

Programs send `Authorization: Bearer T`. The inspector trades the token once (`POST /api/session`)
for an HttpOnly, SameSite=Strict cookie named after the server's port whose value is an HMAC of the
token and the server's origin, never the token. Browsers send a host's cookies to every port of it,
so the gate honours the cookie only on requests the browser marks as this server's own.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from http.cookies import SimpleCookie

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from tether.contracts.errors import ConfigError
from tether.server.origin import check_write, cookie_usable, header
from tether.server.routing import ApiError, error_response

SESSION_PATH = "/api/session"


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve off the loopback interface without a token."""
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to bind {host!r} without a token: the API can resolve suspensions and start or cancel "
            f"runs. Pass --token T (or set TETHER_TOKEN), or bind 127.0.0.1",
            host=host,
        )
    if token is not None and not token.strip():
        raise ConfigError("--token is empty; pass a non-empty secret", host=host)


def session_cookie(token: str, scope: Scope) -> tuple[str, str]:
    """(name, value) of the inspector's cookie for the origin this request addresses.

    Named after the port, so two servers on one host keep separate cookies; valued with an HMAC bound to
    the origin, so a cookie another port receives is not the token and is worth nothing on other servers.
    """
    scheme = "https" if scope.get("scheme") == "https" else "http"
    host = (header(scope, b"host") or "").strip().lower()
    _, sep, port = host.rpartition("]")[2].rpartition(":")  # the part after an IPv6 literal's bracket
    if not (sep and port.isdigit()):
        port = "443" if scheme == "https" else "80"
    value = hmac.new(token.encode(), f"tether-session {scheme}://{host}".encode(), hashlib.sha256).hexdigest()
    return f"tether_session_{port}", value


class TokenGate:
    """ASGI middleware: `Authorization: Bearer T` (or the inspector's cookie) on every route but `GET /healthz`
    and the inspector's `POST /api/session`."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] != "http" or self._exempt(scope) or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        accept = header(scope, b"accept") or ""
        response: Response
        if scope["method"] == "GET" and "text/html" in accept:
            # A browser opening the inspector: a page that asks for the token (still a 401).
            response = HTMLResponse(LOGIN_PAGE, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        else:
            response = error_response(
                ApiError(401, "unauthorized", "missing or wrong token: send 'Authorization: Bearer <token>' "
                         "(the token tether serve was started with)"),
                headers={"WWW-Authenticate": "Bearer"},
            )
        await response(scope, receive, send)

    @staticmethod
    def _exempt(scope: Scope) -> bool:
        path, method = scope["path"], scope["method"]
        return bool((method in ("GET", "HEAD") and path == "/healthz") or (method == "POST" and path == SESSION_PATH))

    def _allowed(self, scope: Scope) -> bool:
        assert self.token is not None
        expected = self.token.encode()
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), expected):
                    return True
        return cookie_usable(scope) and self._cookie_matches(scope)

    def _cookie_matches(self, scope: Scope) -> bool:
        assert self.token is not None
        name, wanted = session_cookie(self.token, scope)
        for key, value in scope["headers"]:
            if key != b"cookie":
                continue
            cookie: SimpleCookie = SimpleCookie()
            try:
                cookie.load(value.decode("latin-1"))
            except Exception:  # a malformed cookie header is just not a session
                continue
            morsel = cookie.get(name)
            if morsel is not None and hmac.compare_digest(morsel.value.encode(), wanted.encode()):
                return True
        return False


async def open_session(request: Request) -> Response:
    """`POST /api/session {"token"}`: the inspector's login; 204 with the session cookie, or 401."""
    try:
        check_write(request)  # a forged login would only log the browser in, but it is a write all the same
    except ApiError as err:
        return error_response(err)
    token: str | None = request.app.state.tether.token
    try:
        given = json.loads(await request.body()).get("token")
    except (ValueError, UnicodeDecodeError, AttributeError):
        given = None
    if not isinstance(given, str):
        return error_response(ApiError(422, "invalid-request", 'the body must be {"token": "<token>"}'))
    if token is None:
        return Response(status_code=204)  # nothing to trade: every request is already let in
    if not hmac.compare_digest(given.encode(), token.encode()):
        return error_response(ApiError(401, "unauthorized", "wrong token: enter the token tether serve was started "
                                       "with"), headers={"WWW-Authenticate": "Bearer"})
    name, value = session_cookie(token, request.scope)
    response = Response(status_code=204)
    response.set_cookie(name, value, path="/", httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return response


LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>tether · token</title>
<style>
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;background:#f6f7f9;color:#1d2330;
display:grid;place-items:center;min-height:100vh;margin:0}
form{background:#fff;padding:28px 32px;border-radius:12px;box-shadow:0 2px 12px #0001;width:min(360px,90vw)}
h1{font-size:18px;margin:0 0 4px}p{color:#5b6475;margin:0 0 16px;font-size:14px}
input{width:100%;box-sizing:border-box;padding:9px 11px;border:1px solid #cfd5df;border-radius:8px;font:inherit}
button{margin-top:12px;width:100%;padding:9px;border:0;border-radius:8px;background:#3559e0;color:#fff;font:inherit;
font-weight:600;cursor:pointer}
</style></head><body>
<form id="f"><h1>tether inspector</h1><p>This server needs its token.</p>
<input id="t" type="password" autocomplete="current-password" placeholder="token" autofocus>
<button>Open</button><p id="m" role="alert"></p></form>
<script>
document.getElementById("f").addEventListener("submit", async function (ev) {
  ev.preventDefault();
  const token = document.getElementById("t").value;
  const res = await fetch("/api/session", {method: "POST", body: JSON.stringify({token: token}),
    headers: {"Content-Type": "application/json", "X-Tether-Request": "1"}});
  if (res.ok) location.reload();
  else document.getElementById("m").textContent = res.status === 401 ? "Wrong token." : "HTTP " + res.status;
});
</script></body></html>
"""
