"""A sampled reply read back as OpenAI tool calls, in the format the policy's chat template teaches it.

Chat models write tool calls as text in their family's own format; which one a policy writes is a setting
(``generation.tool_call_parser``), as vLLM's ``--tool-call-parser`` is for its server:

- ``hermes`` (Qwen2/2.5/3, the builtin tokenizer, Hermes): each call is
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; the text around the blocks is the content.
- ``llama3_json`` (Llama 3.1/3.2/3.3 with JSON tool calling): the reply is the calls alone, each a JSON object
  ``{"name": ..., "parameters": {...}}`` (``arguments`` is read too), several separated by ``;``, optionally
  after ``<|python_tag|>``. A reply that starts with neither is text.
- ``mistral`` (Mistral 7B v0.3, Mixtral, Mistral Small/Nemo before tokenizer v11): ``[TOOL_CALLS]`` and then a
  JSON list of ``{"name": ..., "arguments": {...}}``; the text before the marker is the content, and each call
  gets a 9-character alphanumeric id (Mistral's templates refuse any other). The v11 form
  ``[TOOL_CALLS]name[ARGS]{...}`` is not read.

Every parser is a pure function of the text (and of the ids it is given) and all or nothing: one call that
cannot be read (not JSON, no name, arguments that are not an object, a block left open) leaves the whole reply
as text, with the reason in :attr:`ParsedReply.error`. ``<|python_tag|>`` and ``[TOOL_CALLS]`` are special
tokens, so the text parsed must be decoded with special tokens kept (trainers/rl/harness_rollout.py does).
"""

from __future__ import annotations

import json
import re
import secrets
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

ToolCallFormat = Literal["hermes", "llama3_json", "mistral"]
TOOL_CALL_FORMATS: tuple[str, ...] = get_args(ToolCallFormat)

CallIds = Callable[[int], str]
"""The id of a reply's call i (each parser asks once per call, in order)."""

_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_HERMES_OPEN = "<tool_call>"
PYTHON_TAG = "<|python_tag|>"
TOOL_CALLS = "[TOOL_CALLS]"
_ALNUM = string.ascii_letters + string.digits


@dataclass
class ParsedReply:
    """A sampled reply read as an OpenAI assistant message."""

    content: str
    """The text outside the tool calls (the whole reply when it holds none or one is malformed)."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI ``tool_calls`` (``{"id", "type": "function", "function": {"name", "arguments": JSON text}}``)."""
    error: str = ""
    """Why the reply's tool calls were not read ('' when they were, or when it holds none)."""


def numbered(i: int) -> str:
    """Ids ``call_0``, ``call_1``...: the default, for tests and tools that number calls themselves."""
    return f"call_{i}"


def new_call_ids(fmt: str) -> CallIds:
    """Fresh ids of the shape ``fmt``'s models expect: 9 random alphanumerics for ``mistral``, and
    ``call_<12 hex>_<i>`` (unique per reply and across replies) otherwise."""
    if fmt == "mistral":
        return lambda i: "".join(secrets.choice(_ALNUM) for _ in range(9))
    prefix = f"call_{uuid.uuid4().hex[:12]}"
    return lambda i: f"{prefix}_{i}"


def parse_reply(text: str, fmt: str, call_id: CallIds | None = None) -> ParsedReply:
    """``text`` read in tool-call format ``fmt`` (one of :data:`TOOL_CALL_FORMATS`)."""
    parser = PARSERS.get(fmt)
    if parser is None:
        raise ValueError(
            f"tool call format: expected one of {list(TOOL_CALL_FORMATS)}, found {fmt!r}; set "
            "generation.tool_call_parser to the format the policy's chat template uses"
        )
    return parser(text, call_id or new_call_ids(fmt))


def parse_hermes(text: str, call_id: CallIds = numbered) -> ParsedReply:
    """Hermes ``<tool_call>{...}</tool_call>`` blocks; the text around them is the content."""
    if _HERMES_OPEN not in text:
        return ParsedReply(text)
    blocks = list(_HERMES.finditer(text))
    if text.count(_HERMES_OPEN) != len(blocks):
        return ParsedReply(text, error=f"a {_HERMES_OPEN} without its </tool_call> (a reply cut short?)")
    calls = []
    for i, block in enumerate(blocks):
        try:
            call = json.loads(block.group(1))
        except ValueError as exc:
            return ParsedReply(text, error=f"tool call {i} is not JSON: {exc}")
        read = openai_call(i, call, "arguments", block.group(1), call_id)
        if isinstance(read, str):
            return ParsedReply(text, error=read)
        calls.append(read)
    return ParsedReply(_HERMES.sub("", text).strip(), calls)


def parse_tool_calls(text: str, call_id_prefix: str = "call") -> ParsedReply:
    """:func:`parse_hermes` with ids ``{call_id_prefix}_{i}``."""
    return parse_hermes(text, lambda i: f"{call_id_prefix}_{i}")


def parse_llama3_json(text: str, call_id: CallIds = numbered) -> ParsedReply:
    """Llama 3.x JSON calls: the reply (after an optional ``<|python_tag|>``) is one or more JSON objects
    ``{"name", "parameters"}`` separated by ``;``. A reply that starts otherwise is text; the content of a
    reply read as calls is empty (the format has no room for text beside them)."""
    body = text.strip()
    if body.startswith(PYTHON_TAG):
        body = body[len(PYTHON_TAG) :].lstrip()
    elif not body.startswith("{"):
        return ParsedReply(text)
    decoder, pos, calls = json.JSONDecoder(), 0, list[dict[str, Any]]()
    while pos < len(body):
        i = len(calls)
        try:
            call, end = decoder.raw_decode(body, pos)
        except ValueError as exc:
            return ParsedReply(text, error=f"tool call {i} is not JSON: {exc}")
        read = openai_call(i, call, "parameters", body[pos:end], call_id)
        if isinstance(read, str):
            return ParsedReply(text, error=read)
        calls.append(read)
        pos = _skip_space(body, end)
        if pos < len(body):
            if body[pos] != ";":
                found = body[pos : pos + 40]
                return ParsedReply(text, error=f"after tool call {i}: expected ';' or the reply's end, found {found!r}")
            pos = _skip_space(body, pos + 1)
    if not calls:
        return ParsedReply(text, error=f"expected a JSON tool call after {PYTHON_TAG}, found nothing")
    return ParsedReply("", calls)


def parse_mistral(text: str, call_id: CallIds = numbered) -> ParsedReply:
    """Mistral ``[TOOL_CALLS]`` followed by a JSON list of ``{"name", "arguments"}`` (one object is read as a
    list of one); the text before the marker is the content. A reply may hold the marker more than once."""
    if TOOL_CALLS not in text:
        return ParsedReply(text)
    content, *segments = text.split(TOOL_CALLS)
    decoder, calls = json.JSONDecoder(), list[dict[str, Any]]()
    for segment in segments:
        start = _skip_space(segment, 0)
        try:
            found, end = decoder.raw_decode(segment, start)
        except ValueError as exc:
            return ParsedReply(text, error=f"the list after {TOOL_CALLS} is not JSON: {exc}")
        if segment[end:].strip():
            rest = segment[end:].strip()[:40]
            return ParsedReply(text, error=f"after the list of {TOOL_CALLS}: expected the reply's end, found {rest!r}")
        for call in found if isinstance(found, list) else [found]:
            read = openai_call(len(calls), call, "arguments", json.dumps(call), call_id)
            if isinstance(read, str):
                return ParsedReply(text, error=read)
            calls.append(read)
    if not calls:
        return ParsedReply(text, error=f"an empty list of calls after {TOOL_CALLS}")
    return ParsedReply(content.strip(), calls)


PARSERS: dict[str, Callable[[str, CallIds], ParsedReply]] = {
    "hermes": parse_hermes,
    "llama3_json": parse_llama3_json,
    "mistral": parse_mistral,
}


def openai_call(i: int, call: Any, key: str, written: str, call_id: CallIds) -> dict[str, Any] | str:
    """Call ``i`` (parsed JSON) as an OpenAI tool call, its arguments under ``key`` (or ``arguments``); or why
    it cannot be one."""
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        found = written.strip()[:120]
        return f'tool call {i}: expected {{"name": ..., "{key}": {{...}}}}, found {found}'
    arguments = call.get(key, call.get("arguments", {}))
    if isinstance(arguments, str):  # some models write the arguments as JSON text, as OpenAI sends them
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            return f"tool call {i}: its arguments text is not JSON: {exc}"
    if not isinstance(arguments, dict):
        return f"tool call {i}: expected arguments to be an object, found {arguments!r}"
    return {
        "id": call_id(i),
        "type": "function",
        "function": {"name": call["name"], "arguments": json.dumps(arguments)},
    }


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos
