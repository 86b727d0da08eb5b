"""Scripted models for the gateway: replies fixed in advance, for evaluation baselines and tests.

``gold`` makes mini-swe-agent apply the task's gold patch and submit; ``giveup`` makes it submit at once. Their
replies are in mini-swe-agent's text-based format (one ``mswea_bash_command`` block per reply). The patch
travels base64-encoded, so no byte of it can end the block early.
"""

from __future__ import annotations

import base64
from typing import Any

from swebox.envs.gateway.calls import Completion
from swebox.envs.gateway.harness import MINI_SUBMIT
from swebox.envs.gateway.tool_text import template_messages, tools_of


def mini_action(command: str, thought: str = "") -> str:
    """One mini-swe-agent reply that runs ``command``."""
    return f"THOUGHT: {thought or 'Next step.'}\n\n```mswea_bash_command\n{command}\n```"


def gold_replies(patch: str) -> list[str]:
    encoded = base64.b64encode(patch.encode()).decode()
    return [
        mini_action(f"echo {encoded} | base64 -d | git apply -", "Apply the fix."),
        mini_action(MINI_SUBMIT, "The fix is in place; submit."),
    ]


def giveup_replies() -> list[str]:
    return [mini_action(MINI_SUBMIT, "I give up; submit without changes.")]


class ScriptedModel:
    """Answers a conversation holding i assistant turns with ``replies[i]`` (the last one again past the end): a
    function of the conversation, so that a line of a search that replays a parent's first calls
    (envs/search/harness_lines.py) goes on where the parent's script was. With a tokenizer, the records hold the
    chat template's prompt ids and the reply's ids (log-probability 0: the script is certain)."""

    def __init__(self, replies: list[str], tokenizer: Any | None = None) -> None:
        if not replies:
            raise ValueError("ScriptedModel: expected at least one reply, found none")
        self.replies, self.tokenizer, self.calls = list(replies), tokenizer, 0

    def complete(
        self, messages: list[dict[str, Any]], max_tokens: int | None, seed: int | None, request: dict[str, Any]
    ) -> Completion:
        played = sum(1 for m in messages if m.get("role") == "assistant")
        text = self.replies[min(played, len(self.replies) - 1)]
        self.calls += 1
        if self.tokenizer is None:
            return Completion(text=text)
        rendered = self.tokenizer.apply_chat_template(
            template_messages(messages), tools=tools_of(request), tokenize=False, add_generation_prompt=True
        )
        prompt = self.tokenizer.encode(rendered, add_special_tokens=False)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return Completion(
            text=text,
            prompt_ids=list(prompt),
            token_ids=ids,
            logprobs=[0.0] * len(ids),
            template=self.tokenizer.chat_template or "",
        )
