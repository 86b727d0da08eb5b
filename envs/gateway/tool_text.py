"""Tool calls as a chat model's text: OpenAI messages into what a chat template renders, and a sampled reply
back into OpenAI ``tool_calls``.

A model answering the gateway with token ids (the policy, a scripted model with a tokenizer) sees the request's
``tools`` and the conversation's earlier tool calls and results only through its chat template
(``apply_chat_template(messages, tools=...)``), and writes its own calls as text. The format is the Hermes one
that Qwen2/2.5/3 chat templates, the builtin tokenizer's among them (trainers/policy/models.py), render and that
vLLM's ``hermes`` tool parser reads: each call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.
transformers (5.x) parses replies only through a ``response_schema`` a tokenizer ships with, which the Qwen
tokenizers and the builtin one do not, so the parser is here.

Parsing changes only the response the harness gets: the record keeps the sampled ids exactly as sampled. A
reply whose tool call cannot be read (not JSON, no name) is answered as text, whole, with the reason kept in
``Completion.parse_error``: the harness sees what the model wrote, and the trainer learns from it as written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_OPEN = "<tool_call>"


@dataclass
class ParsedReply:
    """A sampled reply read as an OpenAI assistant message."""

    content: str
    """The text outside the tool calls (the whole reply when it holds none or one is malformed)."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI ``tool_calls`` (``{"id", "type": "function", "function": {"name", "arguments": JSON text}}``)."""
    error: str = ""
    """Why the reply's tool calls were not read ('' when they were, or when it holds none)."""


def parse_tool_calls(text: str, call_id_prefix: str = "call") -> ParsedReply:
    """``text`` (a reply decoded without special tokens) as content and tool calls; call i gets the id
    ``{call_id_prefix}_{i}``. All or nothing: one malformed call makes the whole reply text."""
    if _OPEN not in text:
        return ParsedReply(text)
    blocks = list(_CALL.finditer(text))
    if text.count(_OPEN) != len(blocks):
        return ParsedReply(text, error=f"a {_OPEN} without its </tool_call> (a reply cut short?)")
    calls = []
    for i, block in enumerate(blocks):
        try:
            call = json.loads(block.group(1))
        except ValueError as exc:
            return ParsedReply(text, error=f"tool call {i} is not JSON: {exc}")
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            found = block.group(1).strip()[:120]
            return ParsedReply(
                text, error=f'tool call {i}: expected {{"name": ..., "arguments": {{...}}}}, found {found}'
            )
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):  # some models write the arguments as JSON text, as OpenAI sends them
            try:
                arguments = json.loads(arguments)
            except ValueError as exc:
                return ParsedReply(text, error=f"tool call {i}: its arguments text is not JSON: {exc}")
        if not isinstance(arguments, dict):
            return ParsedReply(text, error=f"tool call {i}: expected arguments to be an object, found {arguments!r}")
        calls.append(
            {
                "id": f"{call_id_prefix}_{i}",
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(arguments)},
            }
        )
    content = _CALL.sub("", text).strip()
    return ParsedReply(content, calls)


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages as chat templates take them: content as text (a list of parts joined, null as ''),
    an assistant's ``tool_calls`` with their arguments as objects (templates write them with ``tojson``; the
    JSON text OpenAI carries would be quoted twice), a ``tool`` message's ``tool_call_id`` and ``name`` kept.
    Two conversations that render alike map to equal lists (the trainer compares them to merge calls)."""
    out = []
    for m in messages:
        message: dict[str, Any] = {"role": str(m["role"]), "content": _text(m.get("content"))}
        calls = m.get("tool_calls")
        if message["role"] == "assistant" and isinstance(calls, list) and calls:
            message["tool_calls"] = [_template_call(c) for c in calls]
        if message["role"] == "tool":
            for key in ("tool_call_id", "name"):
                if isinstance(m.get(key), str):
                    message[key] = m[key]
        out.append(message)
    return out


def tools_of(request: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The request's tools as the chat template is given them (None without any, or when ``tool_choice`` is
    "none": the model may not call them, and OpenAI's servers then leave them out of the prompt too)."""
    tools = request.get("tools")
    if not isinstance(tools, list) or not tools or request.get("tool_choice") == "none":
        return None
    return tools


def _template_call(call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return {"type": "function", "function": {"name": "", "arguments": {}}}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass  # kept as the text it is: the template writes it as a JSON string
    return {"type": "function", "function": {"name": str(function.get("name") or ""), "arguments": arguments}}


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)
