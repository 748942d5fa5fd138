"""The token gate: loopback-only without a token; with one, every route but `GET /healthz` needs it."""

from __future__ import annotations

import hmac
import ipaddress
from http.cookies import SimpleCookie
from urllib.parse import unquote

from starlette.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from tether.contracts.errors import ConfigError
from tether.server.routing import ApiError, error_response

COOKIE = "tether_token"
"""The inspector page keeps the token in this cookie (SameSite=Strict) so its own requests carry it."""


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


class TokenGate:
    """ASGI middleware: `Authorization: Bearer T` (or the inspector's cookie) on every route but `GET /healthz`."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] != "http" or self._exempt(scope) or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        accept = headers.get(b"accept", b"").decode("latin-1")
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
        return bool(scope["method"] in ("GET", "HEAD") and scope["path"] == "/healthz")

    def _allowed(self, scope: Scope) -> bool:
        assert self.token is not None
        expected = self.token.encode()
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), expected):
                    return True
            elif name == b"cookie":
                cookie: SimpleCookie = SimpleCookie()
                try:
                    cookie.load(value.decode("latin-1"))
                except Exception:  # a malformed cookie header is just not a token
                    continue
                morsel = cookie.get(COOKIE)
                if morsel is not None and hmac.compare_digest(unquote(morsel.value).encode(), expected):
                    return True
        return False


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
<button>Open</button></form>
<script>
document.getElementById("f").addEventListener("submit", function (ev) {
  ev.preventDefault();
  document.cookie = "tether_token=" + encodeURIComponent(document.getElementById("t").value) +
    "; path=/; SameSite=Strict";
  location.reload();
});
</script></body></html>
"""
