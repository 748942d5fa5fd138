"""Synthesized provider streams: vendor SSE bodies a real SDK client parses, for offline adapter runs.

A `Reply` (the fake model's vocabulary) becomes the body of one streamed response in the Anthropic
Messages, OpenAI Responses or Chat Completions wire format, its `finish_reason` and
`reasoning_tokens` spelled the way each vendor reports them. `responder(vendor, answer)` is an httpx2
`MockTransport` handler that answers each request with `answer(request_json)`, so the official SDK,
the adapter and the engine all run their real code paths with no network.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal

from tether.models.fake import Reply

if TYPE_CHECKING:
    import httpx2

Vendor = Literal["anthropic", "openai", "openai-compatible"]
Answer = Callable[[dict[str, Any]], Reply]


def _event(name: str | None, data: dict[str, Any]) -> str:
    line = f"data: {json.dumps(data, separators=(',', ':'))}\n\n"
    return f"event: {name}\n{line}" if name else line


def _args(args: dict[str, Any]) -> str:
    return json.dumps(args, separators=(",", ":"))


def _tokens(reply: Reply) -> tuple[int, int]:
    return reply.input_tokens or 10, reply.output_tokens or max(5, reply.reasoning_tokens)


_ANTHROPIC_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "max_tokens": "max_tokens", "refusal": "refusal",
                   "pause": "pause_turn", "content_filter": "refusal"}
_CHAT_FINISH = {"stop": "stop", "tool_calls": "tool_calls", "max_tokens": "length", "content_filter": "content_filter",
                "refusal": "stop"}


def anthropic_sse(reply: Reply, model: str, message_id: str = "msg_tether") -> str:
    """A Messages API stream: text block, then one `tool_use` block per call (`toolu_tether_<n>`)."""
    return "".join(_anthropic_events(reply, model, message_id))


def _anthropic_events(reply: Reply, model: str, message_id: str) -> Iterator[str]:
    tokens_in, tokens_out = _tokens(reply)
    usage = {"input_tokens": tokens_in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message: dict[str, Any] = {"id": message_id, "type": "message", "role": "assistant", "content": [], "model": model,
               "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}
    yield _event("message_start", {"type": "message_start", "message": message})
    blocks: list[tuple[dict[str, Any], dict[str, Any]]] = []
    if reply.text:
        blocks.append(({"type": "text", "text": ""}, {"type": "text_delta", "text": reply.text}))
    for n, call in enumerate(reply.tool_calls):
        block = {"type": "tool_use", "id": f"toolu_tether_{n}", "name": call.name, "input": {}}
        blocks.append((block, {"type": "input_json_delta", "partial_json": _args(call.args)}))
    for index, (block, delta) in enumerate(blocks):
        yield _event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})
        yield _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
    stop = _ANTHROPIC_STOP.get(reply.finish_reason or "", "tool_use" if reply.tool_calls else "end_turn")
    out_usage: dict[str, Any] = {"output_tokens": tokens_out}
    if reply.reasoning_tokens:
        out_usage["output_tokens_details"] = {"thinking_tokens": reply.reasoning_tokens}
    yield _event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": out_usage})
    yield _event("message_stop", {"type": "message_stop"})


def openai_sse(reply: Reply, model: str, response_id: str = "resp_tether") -> str:
    """A Responses API stream: a message item, then one `function_call` item per call."""
    tokens_in, tokens_out = _tokens(reply)
    items: list[dict[str, Any]] = []
    refused = reply.finish_reason == "refusal"
    if reply.text:
        part = {"type": "refusal", "refusal": reply.text} if refused else {"type": "output_text", "text": reply.text,
                                                                             "annotations": []}
        content = [part]
        items.append({"id": "msg_tether", "type": "message", "status": "completed", "role": "assistant",
                      "content": content})
    for n, call in enumerate(reply.tool_calls):
        items.append({"type": "function_call", "id": f"fc_tether_{n}", "call_id": f"call_tether_{n}",
                      "name": call.name, "arguments": _args(call.args), "status": "completed"})
    events: list[tuple[str, dict[str, Any]]] = []
    for index, item in enumerate(items):
        if item["type"] == "message" and refused:
            events.append(("response.refusal.delta", {"item_id": item["id"], "output_index": index,
                                                      "content_index": 0, "delta": reply.text}))
        elif item["type"] == "message":
            events.append(("response.output_text.delta", {"item_id": item["id"], "output_index": index,
                                                          "content_index": 0, "delta": reply.text, "logprobs": []}))
        else:
            added = {**item, "arguments": "", "status": "in_progress"}
            events.append(("response.output_item.added", {"output_index": index, "item": added}))
            events.append(("response.function_call_arguments.delta",
                           {"item_id": item["id"], "output_index": index, "delta": item["arguments"]}))
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
    usage = {"input_tokens": tokens_in, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": tokens_out,
             "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
             "total_tokens": tokens_in + tokens_out}
    cut = {"max_tokens": "max_output_tokens", "content_filter": "content_filter"}.get(reply.finish_reason or "")
    status = "incomplete" if cut else "completed"
    response = {"id": response_id, "object": "response", "created_at": 0, "status": status, "error": None,
                "incomplete_details": {"reason": cut} if cut else None, "model": model, "output": items,
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": usage}
    events.append(("response.incomplete" if cut else "response.completed", {"response": response}))
    return "".join(_event(name, {"type": name, "sequence_number": n, **data}) for n, (name, data) in enumerate(events))


def chat_sse(reply: Reply, model: str, completion_id: str = "chatcmpl-tether") -> str:
    """A Chat Completions stream: content, tool-call deltas, the finish reason, then a usage chunk."""
    tokens_in, tokens_out = _tokens(reply)

    def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> str:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        data = {"id": completion_id, "object": "chat.completion.chunk", "created": 0, "model": model,
                "choices": choices, **extra}
        return _event(None, data)

    refused = reply.finish_reason == "refusal"
    first = {"role": "assistant", "content": None, "refusal": reply.text} if refused else {
        "role": "assistant", "content": reply.text or None}
    out = [chunk(first)]
    for n, call in enumerate(reply.tool_calls):
        fn = {"name": call.name, "arguments": _args(call.args)}
        out.append(chunk({"tool_calls": [{"index": n, "id": f"call_tether_{n}", "type": "function", "function": fn}]}))
    out.append(chunk({}, _CHAT_FINISH.get(reply.finish_reason or "", "tool_calls" if reply.tool_calls else "stop")))
    usage: dict[str, Any] = {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                             "total_tokens": tokens_in + tokens_out}
    if reply.reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
    out.append(chunk(None, usage=usage))
    out.append("data: [DONE]\n\n")
    return "".join(out)


_FORMATS: dict[Vendor, Callable[[Reply, str], str]] = {
    "anthropic": anthropic_sse,
    "openai": openai_sse,
    "openai-compatible": chat_sse,
}


def responder(vendor: Vendor, answer: Answer) -> Callable[[httpx2.Request], httpx2.Response]:
    """An httpx2 `MockTransport` handler: every request is answered with `answer(its JSON body)`."""
    import httpx2

    render = _FORMATS[vendor]

    def handle(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        text = render(answer(body), str(body.get("model", "")))
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=text.encode())

    return handle
