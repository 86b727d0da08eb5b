"""A harness episode's model calls as turns: what the exploit audit reads and the viewer shows.

A text-loop turn is a reply, the action parsed from it, and the observation. A call through the gateway reads
the same way: the reply; its actions, which are either the reply's **tool calls** (OpenAI ``tool_calls``: one
action per call, ``{"tool": name, "arguments": the parsed JSON arguments}``) or, for a text harness, the
commands of its fenced blocks (mini-swe-agent's actions and most text harnesses', one bash action); and what
the harness sent back next (the following call's new messages: for a tool call, the ``tool`` message that
names its id, i.e. the sandbox's result as the harness reported it to the model).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from swebox.envs.episodes.turns import turn_record
from swebox.envs.gateway.calls import CallRecord

_FENCE = re.compile(r"```[^\n`]*\n(.*?)\n?```", re.S)


@dataclass
class CallTurn:
    """One answered call, as a turn."""

    record: CallRecord
    """The call."""
    actions: list[dict[str, Any]]
    """Its actions ({tool, arguments}; a tool call's also ``id``), in the reply's order; [] when it has none."""
    observations: list[str]
    """What the harness sent back for each action (for a text reply: one, everything it sent next)."""

    @property
    def observation(self) -> str:
        return "\n".join(self.observations)


def tool_action(call: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool call as an action. Arguments that are not a JSON object (malformed, or a bare string)
    are kept whole as ``command``, so that the audit's rules still read them."""
    function = call.get("function") or {}
    raw = function.get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        arguments = {"command": raw if isinstance(raw, str) else json.dumps(raw)}
    return {"tool": str(function.get("name") or ""), "arguments": arguments, "id": str(call.get("id") or "")}


def call_turns(records: list[CallRecord]) -> list[CallTurn]:
    """Per answered call, a :class:`CallTurn` (see the module's docstring)."""
    turns = []
    for i, record in enumerate(records):
        completion = record.completion
        if completion is None:
            continue
        later = records[i + 1].messages if i + 1 < len(records) else []
        sent = later[len(record.messages) + 1 :]  # after the call's own messages and the reply
        if completion.tool_calls:
            actions = [tool_action(call) for call in completion.tool_calls]
            results = {m.get("tool_call_id"): _text(m) for m in sent if m.get("role") == "tool"}
            turns.append(CallTurn(record, actions, [results.get(a["id"], "") for a in actions]))
            continue
        commands = "\n".join(_FENCE.findall(completion.text))
        observation = "\n".join(_text(m) for m in sent)
        actions = [{"tool": "bash", "arguments": {"command": commands}}] if commands else []
        turns.append(CallTurn(record, actions, [observation]))
    return turns


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def turn_records(records: list[CallRecord], findings: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Per answered call, a turn record as the viewer shows it (numbered from 1): the reply, its first action
    (``action``; ``tool_calls`` holds every tool call of the reply with its result, ``parse_error`` why a reply's
    tool-call text could not be read), what the harness sent back,
    and (``audit``) the rules of ``findings`` (the episode's audit findings, ``info["audit"]["findings"]``) that
    fired on that turn."""
    out = []
    for number, turn in enumerate(call_turns(records), 1):
        completion = turn.record.completion
        assert completion is not None  # call_turns keeps answered calls only
        record = turn_record(
            number,
            completion.text,
            {
                "action": turn.actions[0] if turn.actions else None,
                "audit_turn": [f for f in findings or [] if f.get("turn") == number],
            },
            turn.observation,
            turn.record.seconds,
            0.0,
            len(completion.token_ids),
            completion.finish_reason,
        )
        if completion.parse_error:  # the reply's tool calls could not be read: it went back as text
            record["parse_error"] = completion.parse_error
        if completion.tool_calls:
            record["tool_calls"] = [
                {**a, "observation": o} for a, o in zip(turn.actions, turn.observations, strict=True)
            ]
        out.append(record)
    return out


class TurnAudit(Protocol):
    """What :func:`audit_calls` needs of an episode's audit (envs/audit/core.py's EpisodeAudit)."""

    def turn(self, number: int, action: dict[str, Any] | None, observation: str) -> list[dict[str, Any]]: ...


def audit_calls(audit: TurnAudit, records: list[CallRecord]) -> None:
    """Each answered call through the episode's exploit audit (env.audit), as a text turn is: every action of
    it (each tool call with its own result) under the call's turn number; a call without one as a format error."""
    for number, turn in enumerate(call_turns(records), 1):
        if not turn.actions:
            audit.turn(number, None, turn.observation)
        elif turn.record.completion is not None and turn.record.completion.tool_calls:
            for action, observation in zip(turn.actions, turn.observations, strict=True):
                audit.turn(number, action, observation)
        else:
            audit.turn(number, turn.actions[0], turn.observation)
