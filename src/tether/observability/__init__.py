"""Observability shells: the terminal progress view (OpenTelemetry export is an optional extra)."""
