"""Tool calls as a chat model's text: OpenAI messages become what a chat template takes, and a sampled reply is
read back into OpenAI tool calls, or kept as text with the reason (the builtin template's rendering of tools:
tests/trainers/policy/test_tool_template.py, which needs torch)."""

from __future__ import annotations

import pytest
from swebox.envs.gateway.tool_text import parse_tool_calls, template_messages, tools_of

from tests.envs.gateway.chat_client import BASH


def test_a_reply_with_several_calls_becomes_openai_tool_calls_and_the_rest_content():
    text = (
        'Look first.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "bash", "arguments": "{\\"command\\": \\"cat a.py\\"}"}\n</tool_call>'
    )
    parsed = parse_tool_calls(text, "call_x")
    assert parsed.error == "" and parsed.content == "Look first."
    assert parsed.tool_calls == [
        {"id": "call_x_0", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
        {"id": "call_x_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat a.py"}'}},
    ]
    assert parse_tool_calls("just text") == type(parsed)("just text")


@pytest.mark.parametrize(
    "text, why",
    [
        ('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"</tool_call>', "tool call 0 is not JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'expected {"name": ..., "arguments": {...}}'),
        ('<tool_call>{"name": "bash", "arguments": [1]}</tool_call>', "expected arguments to be an object"),
        ('<tool_call>{"name": "bash", "arguments": "ls -la"}</tool_call>', "its arguments text is not JSON"),
        ('<tool_call>{"name": "bash", "arguments": {}}</tool_call>\n<tool_call>{"name": "ba', "without its"),
    ],
)
def test_a_malformed_call_leaves_the_whole_reply_as_text_and_says_why(text, why):
    parsed = parse_tool_calls(text)
    assert parsed.content == text and parsed.tool_calls == [] and why in parsed.error


def test_openai_messages_become_what_the_template_takes():
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "x.py"},
    ]
    assert template_messages(messages) == [
        {"role": "user", "content": "ab"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}],
        },
        {"role": "tool", "content": "x.py", "tool_call_id": "c1"},
    ]
    assert tools_of({"tools": [BASH]}) == [BASH]
    assert tools_of({"tools": [BASH], "tool_choice": "none"}) is None and tools_of({}) is None
