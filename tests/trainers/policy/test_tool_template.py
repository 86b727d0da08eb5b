"""The builtin tokenizer's chat template renders tools, earlier calls and their results as Qwen2.5's does, and
what it writes for a call is what the gateway's parser (envs/gateway/tool_text.py) reads back."""

from __future__ import annotations

import json

from swebox.envs.gateway.tool_text import parse_tool_calls
from swebox.trainers.policy.models import build_builtin_tokenizer

from tests.envs.gateway.chat_client import BASH

TOK = build_builtin_tokenizer()
CHAT = [{"role": "system", "content": "S"}, {"role": "user", "content": "fix add"}]


def test_the_builtin_template_renders_plain_chats_as_plain_chatml_and_tools_as_qwen_does():
    plain = TOK.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert plain == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nfix add<|im_end|>\n<|im_start|>assistant\n"
    call = {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}
    chat = [
        *CHAT,
        {"role": "assistant", "content": "", "tool_calls": [call, call]},
        {"role": "tool", "content": "a.py"},
        {"role": "tool", "content": "a.py"},
    ]
    text = TOK.apply_chat_template(chat, tools=[BASH], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nS\n\n# Tools\n") and f"<tools>\n{json.dumps(BASH)}\n</tools>" in text
    assert text.count("<|im_start|>system") == 1  # the system message is part of the tools' system turn
    one = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    assert f"<|im_start|>assistant\n{one}\n{one}<|im_end|>\n" in text
    response = "<tool_response>\na.py\n</tool_response>"
    assert text.endswith(f"<|im_start|>user\n{response}\n{response}<|im_end|>\n<|im_start|>assistant\n")
    # what the template writes for a call is what the parser reads back
    assert parse_tool_calls(one).tool_calls[0]["function"] == {"name": "bash", "arguments": '{"command": "ls"}'}
