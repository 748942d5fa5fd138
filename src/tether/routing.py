"""Model routing: `adapter:model` refs, roles, and the call > profile > workflow > engine order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import ChatModel
from tether.contracts.routes import ResolvedModel

Role = Literal["loop", "extract", "finalize", "summarize", "orchestrate"]
ROLES: tuple[Role, ...] = ("loop", "extract", "finalize", "summarize", "orchestrate")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A requested model with its fallbacks (tried after retries) and an optional effort."""

    model: str
    fallbacks: tuple[str, ...] = ()
    effort: str | None = None

    @property
    def identity(self) -> str:
        """The requested spec as identity sees it: the primary model and effort, never a fallback."""
        return self.model if self.effort is None else f"{self.model}#{self.effort}"


ModelLike = str | Sequence[str] | ModelSpec


def as_spec(model: ModelLike) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, str):
        return ModelSpec(model)
    refs = list(model)
    if not refs:
        raise ConfigError("an empty model list was given; pass 'adapter:model' or a list of them")
    return ModelSpec(refs[0], tuple(refs[1:]))


def split_ref(ref: str) -> tuple[str, str]:
    """Split `adapter:model` at the first colon (`ollama:qwen3:8b` is valid)."""
    adapter, sep, name = ref.partition(":")
    if not sep or not adapter or not name:
        raise ConfigError(f"model ref {ref!r} is not of the form 'adapter:model' (e.g. 'anthropic:claude-sonnet-4-5')")
    return adapter, name


@dataclass
class Router:
    """Resolves a role (or an explicit spec) to adapters registered on the engine."""

    adapters: Mapping[str, ChatModel]
    routes: Mapping[str, ModelLike] = field(default_factory=dict)

    def spec_for(self, role: str, *layers: ModelLike | None) -> ModelSpec:
        """First of `layers` (call, profile, workflow) that is set, else the engine route for `role`."""
        for layer in layers:
            if layer is not None:
                return self._spec(layer)
        route = self.routes.get(role) or (self.routes.get("loop") if role != "loop" else None)
        if route is None:
            raise ConfigError(
                f"no model for role {role!r}: pass model='adapter:model' or set "
                f"Engine(routing={{{role!r}: 'adapter:model'}})",
                role=role,
            )
        return self._spec(route)

    def _spec(self, model: ModelLike) -> ModelSpec:
        """`as_spec`, one `ModelSpec` per model string (frozen: shared by every call that names it)."""
        if not isinstance(model, str):
            return as_spec(model)
        spec = self._specs.get(model)
        if spec is None:
            spec = self._specs[model] = as_spec(model)
        return spec

    _specs: dict[str, ModelSpec] = field(default_factory=dict, repr=False, compare=False)
    _resolved: dict[ModelSpec, tuple[ResolvedModel, ...]] = field(default_factory=dict, repr=False, compare=False)
    """Each spec's models as last resolved: agents that route alike share them (a list and the models made per
    invocation would be more objects per agent in flight); checked against `adapters` on every use."""

    def resolve(self, spec: ModelSpec) -> tuple[ResolvedModel, ...]:
        hit = self._resolved.get(spec)
        if hit is not None and all(self.adapters.get(m.ref.partition(":")[0]) is m.adapter for m in hit):
            return hit
        models = tuple(self.resolve_ref(ref) for ref in (spec.model, *spec.fallbacks))
        self._resolved[spec] = models
        return models

    def resolve_ref(self, ref: str) -> ResolvedModel:
        adapter_id, name = split_ref(ref)
        adapter = self.adapters.get(adapter_id)
        if adapter is None:
            known = ", ".join(sorted(self.adapters)) or "none"
            raise ConfigError(
                f"unknown adapter {adapter_id!r} in {ref!r}; registered adapters: {known}. "
                f"Pass it in Engine(models=[...]).",
                ref=ref,
            )
        return ResolvedModel(ref=ref, adapter=adapter, name=name)
