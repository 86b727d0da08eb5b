"""The ``openai:`` model (ServedModel) serves a function-calling harness: a request with ``tools`` sent from inside a
real sandbox through the real gateway reaches a real OpenAI-compatible server on the host's loopback (a second
gateway's HTTP server, answered by a scripted model) with its tools, tool choice and earlier tool calls and tool
results as sent, and the server's tool calls come back to the sandbox as OpenAI ``tool_calls``; a request without
tools stays text."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

import pytest
from swebox.envs.gateway import Gateway
from swebox.envs.gateway.calls import Completion
from swebox.envs.gateway.server import _handler
from swebox.trainers.policy.backends import OpenAIBackend
from swebox.trainers.rl.harness_rollout import ServedModel
from swebox.trainers.run.config import GenerationConfig

from tests.envs.gateway.chat_client import BASH, CHAT, talk

CALLS = [
    {"id": "call_a", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
    {"id": "call_b", "type": "function", "function": {"name": "bash", "arguments": '{"command": "git diff"}'}},
]


class Upstream:
    """The served model: two ``bash`` calls to a request with tools and no tool result yet; text otherwise."""

    def complete(
        self, messages: list[dict[str, Any]], max_tokens: int | None, seed: int | None, request: dict[str, Any]
    ) -> Completion:
        if request.get("tools") and not any(m["role"] == "tool" for m in messages):
            # OpenAI ends a reply to a forced tool choice (a named function) with "stop", not "tool_calls"
            forced = isinstance(request.get("tool_choice"), dict)
            return Completion(
                text="", tool_calls=[dict(c) for c in CALLS], finish_reason="stop" if forced else "tool_calls"
            )
        return Completion(text=f"Done after {sum(m['role'] == 'tool' for m in messages)} tool results.")


@pytest.fixture
def upstream():
    """A second gateway's HTTP server on the host's loopback: the OpenAI-compatible server the model forwards to."""
    gateway = Gateway(Upstream())
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(gateway))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        yield gateway, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def converse(sandbox, upstream_url: str, fields: dict[str, Any], calls: int) -> tuple[Gateway, list]:
    cfg = GenerationConfig(backend="openai", openai_base_url=upstream_url, openai_model="served", max_new_tokens=32)
    with Gateway(ServedModel(OpenAIBackend(cfg))) as gateway:
        answers = talk(sandbox, gateway, {**fields, "max_tokens": 32}, calls)
    assert [status for status, _ in answers] == [200] * calls, answers
    return gateway, [json.loads(answer)["choices"][0] for _, answer in answers]


def test_tools_go_upstream_and_the_upstream_tool_calls_come_back_to_the_sandbox(sandbox, upstream):
    served, url = upstream
    fields = {"tools": [BASH], "tool_choice": "auto", "parallel_tool_calls": True}
    gateway, (first, second) = converse(sandbox, url, fields, calls=2)

    # the sandbox got the upstream's calls, ids and JSON arguments unchanged, as OpenAI tool calls
    assert first["finish_reason"] == "tool_calls" and first["message"]["tool_calls"] == CALLS
    assert not first["message"].get("content")
    assert gateway.records[0].completion.tool_calls == CALLS
    # the upstream saw the tools and the function-calling fields as the harness sent them
    seen = [record.request for record in served.records]
    assert [{k: r[k] for k in fields} for r in seen] == [fields, fields]
    # ... and the conversation's assistant tool calls and tool results unchanged
    sent = served.records[1].messages
    assert sent[:2] == CHAT and sent[2]["role"] == "assistant" and sent[2]["tool_calls"] == CALLS
    assert [(m["role"], m["tool_call_id"], m["content"]) for m in sent[3:]] == [
        ("tool", "call_a", 'ran {"command": "ls"}'),
        ("tool", "call_b", 'ran {"command": "git diff"}'),
    ]
    assert second["finish_reason"] == "stop" and second["message"]["content"] == "Done after 2 tool results."
    assert not second["message"].get("tool_calls")


def test_a_request_without_tools_stays_text(sandbox, upstream):
    served, url = upstream
    gateway, (reply,) = converse(sandbox, url, {}, calls=1)
    assert reply["finish_reason"] == "stop" and reply["message"]["content"] == "Done after 0 tool results."
    assert not reply["message"].get("tool_calls") and gateway.records[0].completion.tool_calls == []
    (record,) = served.records
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(record.request)
    assert record.messages == CHAT


def test_a_forced_tool_choice_reaches_the_server_and_its_finish_reason_comes_back(sandbox, upstream):
    served, url = upstream
    fields = {"tools": [BASH], "tool_choice": {"type": "function", "function": {"name": "bash"}}}
    _, (reply,) = converse(sandbox, url, fields, calls=1)
    assert reply["finish_reason"] == "stop" and reply["message"]["tool_calls"] == CALLS
    assert served.records[0].request["tool_choice"] == fields["tool_choice"]


def test_only_the_function_calling_fields_are_passed_on():
    cfg = GenerationConfig(backend="openai", openai_base_url="http://127.0.0.1:9/v1", openai_model="served")
    with pytest.raises(ValueError, match=r"expected fields among .*found \['response_format'\]"):
        OpenAIBackend(cfg).chat_reply(CHAT, 8, {"response_format": {"type": "json_object"}})
