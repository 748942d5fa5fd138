"""Bridges that run agents written for other frameworks inside tether workflows (each one an optional extra).

`tether.integrations.pydantic_ai` (extra `pydantic-ai`) runs a `pydantic_ai.Agent` durably and under the run's
ceilings. Nothing here is imported by `import tether`.
"""
