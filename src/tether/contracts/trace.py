"""The W3C trace context of the tool call running in this task, for tools run in subprocesses.

An OpenTelemetry exporter sets it while an `execute_tool` span is open; executors that start a
process pass it on as the `TRACEPARENT` environment variable, so the tool's own spans join the trace.
"""

from __future__ import annotations

from contextvars import ContextVar

# One context variable for the process; its values are per task, so concurrent tool calls never share.
TRACEPARENT: ContextVar[str | None] = ContextVar("tether_traceparent", default=None)
