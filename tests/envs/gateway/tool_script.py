"""A scripted gateway model that answers with OpenAI tool calls, for the tiny agent's tool mode
(``TINY_AGENT_TOOLS=1``, tiny_agent.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

from swebox.envs.gateway.calls import Completion


class ToolScript:
    """A gateway model that answers with tool calls: reply i of a conversation holding i assistant turns is
    ``commands[i]`` as one ``bash`` tool call (no tool call past the end: the tiny agent stops)."""

    def __init__(self, commands: list[str]) -> None:
        self.commands = commands
        self.requests: list[dict[str, Any]] = []
        """Each call's request fields, as the gateway passed them."""

    def complete(
        self, messages: list[dict[str, Any]], max_tokens: int | None, seed: int | None, request: dict[str, Any]
    ) -> Completion:
        self.requests.append(request)
        played = sum(m["role"] == "assistant" for m in messages)
        if played >= len(self.commands):
            return Completion(text="Done.")
        call = {
            "id": f"call_{played}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": self.commands[played]})},
        }
        return Completion(text="", tool_calls=[call], finish_reason="tool_calls")


def apply(patch: str) -> str:
    """A command that applies ``patch`` to the repository (base64: no byte of it ends the JSON or the shell word)."""
    return f"cd /testbed && echo {base64.b64encode(patch.encode()).decode()} | base64 -d | git apply -"
