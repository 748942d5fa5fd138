"""`Context`: an agent's policy for keeping its conversation inside the model's window (docs/agents.md, *Context*)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from tether.contracts.errors import ConfigError

Strategy = Literal["drop-oldest", "summarize"]
STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)


@dataclass(frozen=True, slots=True)
class Context:
    """How much of an agent's conversation each request carries, and what happens to the rest.

    Before a dispatch whose input estimate passes `max_input_tokens` (None: the serving model's context window
    less the call's output limit), the turns older than the last `keep_last` exchanges are compacted: dropped
    (`"drop-oldest"`), or replaced by a summary the agent's model writes (`"summarize"`: a priced, journaled
    call). The system prompt and the first user message always stay. Tool results longer than
    `max_tool_result_tokens` reach the model cut, with a marker; the journal keeps them whole.
    """

    max_input_tokens: int | None = None
    """The most input tokens (tether's chars/4 estimate) a request may carry."""
    keep_last: int = 4
    """Exchanges (an assistant turn and the tool results answering it) always kept verbatim."""
    strategy: Strategy = "drop-oldest"
    """`"drop-oldest"` (the default: costs nothing) or `"summarize"` (one model call per compaction)."""
    max_tool_result_tokens: int | None = None
    """Tool results past this many tokens are shown to the model cut (None: whole)."""
    summary_max_tokens: int = 1_024
    """The output limit of a summarize call."""

    def __post_init__(self) -> None:
        for name in ("max_input_tokens", "max_tool_result_tokens"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 64):
                raise ConfigError(f"Context.{name} must be a whole number of tokens >= 64 or None, got {value!r}")
        if type(self.keep_last) is not int or self.keep_last < 1:
            raise ConfigError(f"Context.keep_last must be a whole number >= 1, got {self.keep_last!r}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"Context.strategy must be one of {', '.join(map(repr, STRATEGIES))}, "
                              f"got {self.strategy!r}")
        if type(self.summary_max_tokens) is not int or self.summary_max_tokens < 16:
            raise ConfigError(f"Context.summary_max_tokens must be a whole number >= 16, got "
                              f"{self.summary_max_tokens!r}")


def cut_text(text: str, chars: int, what: str) -> str:
    """`text` cut to about `chars` characters (its head and tail kept) with a marker saying how much was cut."""
    if len(text) <= chars:
        return text
    head = chars * 3 // 4
    tail = chars - head
    cut = len(text) - head - tail
    marker = f"\n[... {cut} of {len(text)} characters (about {cut // 4} tokens) of {what} cut here ...]\n"
    return text[:head] + marker + (text[-tail:] if tail else "")
