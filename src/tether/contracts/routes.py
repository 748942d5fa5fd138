"""A routed model: what routing (`tether.routing`) hands the agent loop for one `adapter:model` ref."""

from __future__ import annotations

from dataclasses import dataclass

from tether.contracts.protocols import ChatModel


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """A routed model: `ref` is `adapter:model`, `adapter` the adapter object, `name` the model part."""

    ref: str
    adapter: ChatModel
    name: str
