"""Which `Host` names the server answers: the defence against DNS rebinding.

A page that gets its own name (`evil.test`) to resolve to this server's address is same-origin with
it, so the browser lets it read every answer; the only trace is the `Host` header, which carries the
name the page used. Answered by default: `localhost` and `*.localhost` (browsers resolve those to
loopback without asking DNS) and IP literals (rebinding needs a name, so a browser sends an IP only
when the page itself was loaded from that address). Anything else must be configured.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from tether.contracts.errors import ConfigError
from tether.server.routing import ApiError, error_response

_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")


def host_name(value: str) -> str | None:
    """The name in a `Host` value (`name`, `name:port`, `[v6]:port`), lowercased, without port or a final
    dot; None when it is not a host name."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        return name if _is_ip(name) else None
    name, sep, port = value.rpartition(":")
    if not sep:
        name = value
    elif not port.isdigit():
        return None
    name = name.removesuffix(".")
    return name if _is_ip(name) or _NAME.fullmatch(name) else None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostPolicy:
    """Loopback names and IP literals, plus configured names: exact, `*.example.org` for any name under
    it, or `*` for any host at all (the rebinding defence off, e.g. behind a proxy that checks Host)."""

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        self.any = False
        self.names: set[str] = set()
        self.suffixes: list[str] = []
        for raw in allowed:
            value = raw.strip().lower().removesuffix(".")
            if value == "*":
                self.any = True
            elif value.startswith("*.") and host_name(value[2:]) is not None and "." in value[2:]:
                self.suffixes.append(value[1:])  # never `*.com`: anyone can buy a name under it
            elif _is_ip(value.strip("[]")):
                self.names.add(value.strip("[]"))
            elif (name := host_name(value)) is not None:
                self.names.add(name)
            else:
                raise ConfigError(f"allowed host {raw!r} is not a host name; pass a name (tether.example.org), "
                                  f"'*.example.org' for every name under a domain you control, or '*' for any",
                                  host=raw)

    def allows(self, name: str) -> bool:
        if self.any or name == "localhost" or name.endswith(".localhost") or name in self.names or _is_ip(name):
            return True
        return any(name.endswith(suffix) for suffix in self.suffixes)


class HostGuard:
    """ASGI middleware: refuse (403 `host-not-allowed`) a request whose `Host` the policy does not allow.

    A request without `Host` (HTTP/1.0) passes: browsers always send one, so it is not a rebinding page.
    """

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
        name = host_name(raw) if raw is not None else None
        if raw is None or (name is not None and self.policy.allows(name)):
            await self.app(scope, receive, send)
            return
        if name is None:
            err = ApiError(400, "bad-host", f"the Host header {raw!r} is not a host name (name or name:port)",
                           host=raw)
        else:
            err = ApiError(403, "host-not-allowed", f"Host {name!r} is not allowed: this server answers localhost, "
                           f"IP addresses and the names it was started with, so a web page that reaches it under "
                           f"another name (DNS rebinding) cannot read it. Start tether serve with --allowed-host "
                           f"{name} to accept it (create_app(allowed_hosts=[...]) when embedding)", host=name)
        await error_response(err)(scope, receive, send)
