"""`McpStartError`: an MCP server that could not be started, with the typed cause behind the message."""

from __future__ import annotations

from typing import Literal, cast

from tether.contracts.errors import ConfigError

StartCause = Literal["not-found", "exited", "timeout", "max-tools", "failed"]
"""Why a server did not start: its command is missing, it exited, it missed the start deadline, it listed
more tools than `max_tools`, or another failure (a refused connection, a broken handshake)."""


class McpStartError(ConfigError):
    """An MCP server did not start; `cause` says why, `data` holds the server, the numbers and its stderr tail."""

    code = "mcp-start"

    @property
    def cause(self) -> StartCause:
        return cast(StartCause, self.data.get("cause", "failed"))
