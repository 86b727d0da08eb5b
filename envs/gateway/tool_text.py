"""Tool calls as a chat model's text: OpenAI messages into what a chat template renders, and a sampled reply
back into OpenAI ``tool_calls``.

A model answering the gateway with token ids (the policy, a scripted model with a tokenizer) sees the request's
``tools`` and the conversation's earlier tool calls and results only through its chat template
(``apply_chat_template(messages, tools=...)``), and writes its own calls as text. The format is the Hermes one
that Qwen2/2.5/3 chat templates, the builtin tokenizer's among them (trainers/policy/models.py), render and that
vLLM's ``hermes`` tool parser reads: each call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
Llama 3 JSON and Mistral ``[TOOL_CALLS]`` replies are read too (tool_parsers.py, ``generation.tool_call_parser``).
transformers (5.x) parses replies only through a ``response_schema`` a tokenizer ships with, which the Qwen
tokenizers and the builtin one do not, so the parsers are here.

Parsing changes only the response the harness gets: the record keeps the sampled ids exactly as sampled. A
reply whose tool call cannot be read (not JSON, no name) is answered as text, whole, with the reason kept in
``Completion.parse_error``: the harness sees what the model wrote, and the trainer learns from it as written.
"""

from __future__ import annotations

import json
from typing import Any

from swebox.envs.gateway.calls import BadRequest
from swebox.envs.gateway.tool_parsers import ParsedReply, parse_tool_calls

__all__ = ["ParsedReply", "check_tool_choice", "parse_tool_calls", "template_messages", "tools_of"]


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


def check_tool_choice(request: dict[str, Any]) -> None:
    """Refuse (:class:`BadRequest`, HTTP 400) a ``tool_choice`` a model sampling freely cannot honour.

    "auto" (or none given) lets the model choose, "none" leaves the tools out of the prompt (:func:`tools_of`) and
    its reply is read as text. "required" and a named function would need the model's sampling constrained (or
    its turn prefilled, which would put tokens it did not sample into what the trainer learns from), so they are
    refused rather than silently ignored."""
    choice = request.get("tool_choice")
    if choice is None or choice in ("auto", "none"):
        return
    raise BadRequest(
        "tool_choice: expected 'auto' or 'none' (the local policy samples freely; it cannot be made to call a "
        f"tool), found {json.dumps(choice)}; send tool_choice 'auto' or 'none' (or leave it out) to the local "
        "policy, or evaluate with an openai: model, whose server enforces tool_choice itself"
    )


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
