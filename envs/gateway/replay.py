"""Fork by replay: a fresh harness run whose first k model calls are answered from a parent run's records.

A running agent program cannot be copied mid-run (no process checkpointing here), so a search forks a harness
episode at call k by starting the harness again from the same start state and answering its first k calls
with the parent's recorded replies. Each replayed call is checked: the messages the child's harness sends must
equal, exactly, the messages the parent's harness sent at that call, and so must every other request field
that changes what a model would answer (``CallRecord.request``: ``tools`` and ``tool_choice`` say what it may
call, ``max_tokens`` where its reply is cut, the sampling parameters and ``response_format`` how it samples;
only the transport fields of ``calls.TRANSPORT_FIELDS`` are not compared). A recorded reply answers only the
request it was sampled for. Then the child has seen what the parent saw, and (its commands being the same)
its sandbox holds what the parent's held. When a prompt differs (a
harness whose prompts depend on the time, randomness or anything outside the start state; a command whose
output does), the child has *diverged*: the call is refused (HTTP 403, which OpenAI clients do not retry) and
:attr:`ReplayModel.diverged` says where. After the replay the child's own model samples, until
``stop_after`` calls have been answered; the next call is refused and :attr:`ReplayModel.paused` set (the
search values the state the harness left, then forks or ends it).

Cost: a replay pays the harness's own work again (its startup and every command of the replayed replies);
only the model calls are free.
"""

from __future__ import annotations

import json
from typing import Any

from swebox.envs.gateway.calls import CallRecord, ChatModel, Completion, OverLimit


class ReplayDiverged(OverLimit):
    """The child's harness sent a prompt its parent did not."""


class ReplayPaused(OverLimit):
    """The search stops the child here (it has played the calls it was asked to)."""


class ReplayModel:
    """Answers calls 0..len(prefix)-1 from ``prefix`` (checked), then with ``model``, up to ``stop_after``
    answered calls (None: no stop)."""

    def __init__(self, prefix: list[CallRecord], model: ChatModel, stop_after: int | None = None) -> None:
        if any(r.completion is None for r in prefix):
            raise ValueError("ReplayModel: expected a prefix of answered calls; found a refused one")
        if stop_after is not None and stop_after < len(prefix):
            raise ValueError(f"ReplayModel: expected stop_after >= {len(prefix)} (the prefix); found {stop_after}")
        self.prefix, self.model, self.stop_after = list(prefix), model, stop_after
        self.calls = 0
        """Calls the harness made (answered or not)."""
        self.replayed = 0
        """Calls answered from the prefix."""
        self.diverged = ""
        """Where and how the child left the parent's calls ('' while it has not)."""
        self.paused = False
        """True once a call past ``stop_after`` was refused."""

    def complete(
        self, messages: list[dict[str, Any]], max_tokens: int | None, seed: int | None, request: dict[str, Any]
    ) -> Completion:
        index, self.calls = self.calls, self.calls + 1
        if self.diverged:  # a harness that goes on after the refusal gets refused again
            raise ReplayDiverged(f"replay diverged: {self.diverged}")
        if index < len(self.prefix):
            recorded = self.prefix[index]
            if messages != recorded.messages:
                self.diverged = f"call {index}: {difference(recorded.messages, messages)}"
                raise ReplayDiverged(f"replay diverged: {self.diverged}")
            if request != recorded.request:
                self.diverged = f"call {index}: {field_difference(recorded.request, request)}"
                raise ReplayDiverged(f"replay diverged: {self.diverged}")
            self.replayed += 1
            assert recorded.completion is not None  # checked in __init__
            return recorded.completion
        if self.stop_after is not None and index >= self.stop_after:
            self.paused = True
            raise ReplayPaused(f"the search paused this line after {self.stop_after} calls")
        return self.model.complete(messages, max_tokens, seed, request)

    def finished_replay(self) -> bool:
        """False when the harness exited before it made every call of the prefix (it left the parent's path
        too: the parent went on); sets :attr:`diverged` then."""
        if not self.diverged and self.calls < len(self.prefix):
            self.diverged = f"the harness exited after {self.calls} of the parent's {len(self.prefix)} calls"
        return not self.diverged


def difference(expected: list[dict[str, Any]], found: list[dict[str, Any]]) -> str:
    """Where two prompts first differ, in one line."""
    for i, (a, b) in enumerate(zip(expected, found, strict=False)):
        if a != b:
            return (
                f"message {i} differs: expected {json.dumps(a)[:120]}..., found {json.dumps(b)[:120]}... "
                "(does the harness's prompt depend on the time, randomness or a command's varying output?)"
            )
    return f"expected {len(expected)} messages, found {len(found)}"


def field_difference(expected: dict[str, Any], found: dict[str, Any]) -> str:
    """The first request field (by name) whose value differs, in one line."""
    name = sorted(k for k in {*expected, *found} if expected.get(k, _ABSENT) != found.get(k, _ABSENT))[0]

    def shown(request: dict[str, Any]) -> str:
        return json.dumps(request[name])[:120] if name in request else "absent"

    return (
        f"request field {name!r} differs: expected {shown(expected)}, found {shown(found)} (a recorded reply "
        "answers only the request it was sampled for: does the harness's configuration differ from the parent's?)"
    )


_ABSENT = object()
