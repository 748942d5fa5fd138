"""Canonical conversation: messages of ordered parts, tool specs and the provider-neutral `ChatRequest`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class TextPart(BaseModel):
    model_config = ConfigDict(frozen=True)
    type: Literal["text"] = "text"
    text: str


class ToolCallPart(BaseModel):
    """A tool call the model made; `id` is minted by the engine, adapters map it to wire ids."""

    model_config = ConfigDict(frozen=True)
    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class ToolResultPart(BaseModel):
    model_config = ConfigDict(frozen=True)
    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool = False


class RawPart(BaseModel):
    """A provider-specific part (e.g. a thinking block): kept in history, sent only to `family`."""

    model_config = ConfigDict(frozen=True)
    type: Literal["raw"] = "raw"
    family: str
    data: dict[str, Any]


Part = Annotated[TextPart | ToolCallPart | ToolResultPart | RawPart, Field(discriminator="type")]


class Message(BaseModel):
    """One turn of the conversation. Tool results travel in `tool` messages."""

    model_config = ConfigDict(frozen=True)
    role: Literal["system", "user", "assistant", "tool"]
    parts: tuple[Part, ...]

    @classmethod
    def text(cls, role: Literal["system", "user", "assistant"], text: str) -> Message:
        return cls(role=role, parts=(TextPart(text=text),))

    @property
    def text_content(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]


class ToolSpec(BaseModel):
    """What the model sees of a tool: name, description and the JSON schema of its arguments."""

    model_config = ConfigDict(frozen=True)
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class OutputFormat(BaseModel):
    """Structured output requested natively (`mode="native"`, strict JSON schema)."""

    model_config = ConfigDict(frozen=True)
    name: str = "result"
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool = True


class ChatRequest(BaseModel):
    """The provider-neutral request an adapter turns into its wire format.

    `model` is the adapter-local model name (the part after `adapter:`).
    `tool_choice` is "auto" | "none" | "required" | a tool name.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True)
    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str = "auto"
    max_output_tokens: int | None = None
    output_format: OutputFormat | None = None
    effort: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)

    @property
    def system(self) -> str:
        return "\n\n".join(m.text_content for m in self.messages if m.role == "system")
