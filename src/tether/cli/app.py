"""The CLI's view of target resolution (`tether.engine.targets`): its usage error and the no-model hint."""

from __future__ import annotations

from tether.engine.targets import Resolved, TargetError, configured_store, resolve

__all__ = ["CommandLineError", "Resolved", "configured_store", "no_model_hint", "resolve"]


class CommandLineError(TargetError):
    """The command line itself is malformed (a target not MODULE:ATTR, options that exclude each other)."""


def no_model_hint(resolved: Resolved) -> str | None:
    """How to give the CLI a model, when the default engine (which has none) ran a workflow that needs one."""
    if resolved.source != "default" or resolved.has_models:
        return None
    return (
        "the CLI ran it on a default engine, which has no models: define `engine = tether.Engine(models=[...], "
        "routing={...})` in the workflow's module, or pass --app MODULE:ATTR naming your tether.Engine"
    )
