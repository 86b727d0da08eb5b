"""Each tool-call format the policy may write (Hermes, Llama 3 JSON, Mistral) read from exact reply texts: calls
become OpenAI tool calls, several per reply; a malformed one leaves the whole reply as text with the reason; a
plain reply is text without an error. The setting that picks the format is checked against the parsers."""

from __future__ import annotations

import json
import re
import typing

import pytest
from swebox.envs.gateway.calls import BadRequest
from swebox.envs.gateway.tool_parsers import (
    TOOL_CALL_FORMATS,
    new_call_ids,
    parse_hermes,
    parse_llama3_json,
    parse_mistral,
    parse_reply,
)
from swebox.envs.gateway.tool_text import check_tool_choice


def called(parsed) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls]


LS, CAT = ("bash", {"command": "ls"}), ("bash", {"command": "cat a.py"})


# ---- Llama 3 JSON -------------------------------------------------------------------------------------------
def test_llama3_json_one_call_with_and_without_the_python_tag():
    for text in (
        '{"name": "bash", "parameters": {"command": "ls"}}',
        '<|python_tag|>{"name": "bash", "parameters": {"command": "ls"}}',
        '  \n{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}\n',  # arguments as JSON text, too
    ):
        parsed = parse_llama3_json(text)
        assert parsed.error == "" and parsed.content == "" and called(parsed) == [LS], text
        assert parsed.tool_calls[0]["id"] == "call_0" and parsed.tool_calls[0]["type"] == "function"


def test_llama3_json_several_calls_separated_by_semicolons():
    text = (
        '<|python_tag|>{"name": "bash", "parameters": {"command": "ls"}}; '
        '{"name": "bash", "parameters": {"command": "cat a.py"}}'
    )
    parsed = parse_llama3_json(text)
    assert parsed.error == "" and called(parsed) == [LS, CAT]
    assert [c["id"] for c in parsed.tool_calls] == ["call_0", "call_1"]


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"name": "bash", "parameters": {"command": "ls"}', "tool call 0 is not JSON"),
        ('{"name": "bash", "parameters": {}} {"name": "bash", "parameters": {}}', "expected ';' or the reply's end"),
        ('{"name": "bash", "parameters": {}}; {"name": "ba', "tool call 1 is not JSON"),
        ('{"answer": 42}', 'expected {"name": ..., "parameters": {...}}'),
        ('{"name": "bash", "parameters": [1]}', "expected arguments to be an object"),
        ("<|python_tag|>", "found nothing"),
        ("<|python_tag|>print('hi')", "tool call 0 is not JSON"),
    ],
)
def test_llama3_json_a_malformed_call_leaves_the_reply_as_text(text, why):
    parsed = parse_llama3_json(text)
    assert parsed.content == text and parsed.tool_calls == [] and why in parsed.error


def test_llama3_json_plain_text_is_text_without_an_error():
    for text in ("I will look at the files first.", 'Run this: {"name": "bash"}', ""):
        assert parse_llama3_json(text) == type(parse_llama3_json(""))(text)


# ---- Mistral ------------------------------------------------------------------------------------------------
def test_mistral_calls_after_the_marker_with_nine_character_ids():
    text = (
        'Let me look.[TOOL_CALLS] [{"name": "bash", "arguments": {"command": "ls"}}, '
        '{"name": "bash", "arguments": {"command": "cat a.py"}}]'
    )
    parsed = parse_reply(text, "mistral")
    assert parsed.error == "" and parsed.content == "Let me look." and called(parsed) == [LS, CAT]
    ids = [c["id"] for c in parsed.tool_calls]
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids) and ids[0] != ids[1]
    one = parse_mistral('[TOOL_CALLS]{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}')
    assert one.content == "" and called(one) == [LS] and one.tool_calls[0]["id"] == "call_0"
    two = parse_mistral(
        '[TOOL_CALLS][{"name": "bash", "arguments": {"command": "ls"}}]'
        '[TOOL_CALLS][{"name": "bash", "arguments": {"command": "cat a.py"}}]'
    )
    assert two.error == "" and called(two) == [LS, CAT]


@pytest.mark.parametrize(
    "text, why",
    [
        ('[TOOL_CALLS] [{"name": "bash", "arguments": {"command": "ls"}}', "is not JSON"),
        ('[TOOL_CALLS] [{"arguments": {}}]', 'expected {"name": ..., "arguments": {...}}'),
        ('[TOOL_CALLS] [{"name": "bash", "arguments": "ls -la"}]', "its arguments text is not JSON"),
        ('[TOOL_CALLS] [{"name": "bash", "arguments": {}}] and then some', "expected the reply's end"),
        ("[TOOL_CALLS] []", "an empty list of calls"),
        ("[TOOL_CALLS]bash[ARGS]{}", "is not JSON"),  # the v11 form is not read
    ],
)
def test_mistral_a_malformed_call_leaves_the_reply_as_text(text, why):
    parsed = parse_mistral(text)
    assert parsed.content == text and parsed.tool_calls == [] and why in parsed.error


def test_mistral_plain_text_is_text_without_an_error():
    text = 'The answer is [{"name": "bash"}] in JSON.'
    assert parse_mistral(text).content == text and not parse_mistral(text).tool_calls and not parse_mistral(text).error


# ---- Hermes through the same entry point ----------------------------------------------------------------------
def test_hermes_through_parse_reply_and_each_format_ignores_the_others():
    hermes = 'Look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    parsed = parse_reply(hermes, "hermes")
    assert parsed.content == "Look." and called(parsed) == [LS]
    assert re.fullmatch(r"call_[0-9a-f]{12}_0", parsed.tool_calls[0]["id"])
    assert parse_hermes('{"name": "bash", "parameters": {}}').tool_calls == []
    assert parse_mistral(hermes).tool_calls == [] and parse_llama3_json(hermes).tool_calls == []


def test_the_settings_formats_are_the_parsers_and_an_unknown_one_is_refused():
    from swebox.trainers.run.config_policy import GenerationConfig

    hint = typing.get_type_hints(GenerationConfig)["tool_call_parser"]
    assert typing.get_args(hint) == TOOL_CALL_FORMATS == ("hermes", "llama3_json", "mistral")
    with pytest.raises(ValueError, match="expected one of"):
        parse_reply("x", "pythonic")
    with pytest.raises(ValueError, match="generation.tool_call_parser"):
        GenerationConfig(tool_call_parser="pythonic")
    first, second = new_call_ids("hermes"), new_call_ids("hermes")
    assert first(0) != second(0)  # unique across replies, not only within one


# ---- tool_choice ---------------------------------------------------------------------------------------------
def test_tool_choice_auto_and_none_pass_and_a_forced_one_is_refused_with_how_to_fix():
    for request in ({}, {"tool_choice": "auto"}, {"tool_choice": "none"}):
        check_tool_choice(request)
    for choice in ("required", {"type": "function", "function": {"name": "bash"}}, "any"):
        with pytest.raises(BadRequest) as refused:
            check_tool_choice({"tool_choice": choice})
        message = str(refused.value)
        assert "expected 'auto' or 'none'" in message and f"found {json.dumps(choice)}" in message
        assert "openai: model" in message
