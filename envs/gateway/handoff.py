"""A gateway model answered from outside: inversion of control for harness episodes.

The harness runs on a thread of its own (:func:`~swebox.envs.gateway.harness.run_harness`); each model call it
makes is handed over a queue to whoever drives the episode (the Gymnasium env of
envs/frameworks/harness_gym_env.py), and the gateway's thread waits for the answer. The driver reads
:attr:`Handoff.events`: a ``("call", PendingCall)`` for each call, then one ``("exit", HarnessRun)`` (or
``("error", exception)``) when the harness's run is over.

Nothing waits forever: a call nobody answers within the episode's ``wall_s`` is refused as the gateway refuses
a call past ``wall_s`` (HTTP 403, ``limit == "wall_s"``), and :meth:`Handoff.stop` refuses the pending call and
every later one at once, so that a harness that honours refusals exits.
"""

from __future__ import annotations

import functools
import json
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from swebox.envs.gateway.calls import Completion, OverLimit
from swebox.envs.gateway.tool_parsers import openai_call

_STOP = object()
"""Put in a pending call's answer slot by :meth:`Handoff.stop`: refuse the call."""


@dataclass
class PendingCall:
    """One model call of the harness, waiting for its answer."""

    messages: list[dict[str, Any]]
    """The chat messages the harness sent, as sent."""
    max_tokens: int | None
    """The most sampled tokens the gateway allows this call (None: no bound)."""
    seed: int | None
    """The call's sampling seed (the request's, or the episode seed + the call's index; None: none)."""
    request: dict[str, Any]
    """The request's other fields, as sent (``tools``, ``tool_choice``, sampling parameters...)."""
    answer: queue.Queue = field(default_factory=lambda: queue.Queue(maxsize=1), repr=False)
    """Where the driver puts the call's Completion (one answer per call)."""

    def to_dict(self) -> dict[str, Any]:
        """The call as plain data: ``messages``, ``tools`` ([] when none), ``max_tokens``, ``seed``, ``request``."""
        return {
            "messages": self.messages,
            "tools": list(self.request.get("tools") or []),
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "request": self.request,
        }


class Handoff:
    """A :class:`~swebox.envs.gateway.calls.ChatModel` whose answers come from the driver, one call at a time."""

    def __init__(self, wall_s: float) -> None:
        """``wall_s``: seconds from now after which a call waiting for its answer is refused (``wall_s``)."""
        self.wall_s = wall_s
        self.deadline = time.monotonic() + wall_s
        self.events: queue.Queue = queue.Queue()
        """``("call", PendingCall)``, then ``("exit", HarnessRun)`` or ``("error", BaseException)``."""
        self._lock = threading.Lock()
        self._stopped = ""
        self._pending: PendingCall | None = None

    def complete(
        self, messages: list[dict[str, Any]], max_tokens: int | None, seed: int | None, request: dict[str, Any]
    ) -> Completion:
        call = PendingCall(messages, max_tokens, seed, request)
        with self._lock:  # stop() sees either no call or this one: never a call it cannot refuse
            if self._stopped:
                raise OverLimit(self._stopped)
            self._pending = call
        self.events.put(("call", call))
        try:
            answer = call.answer.get(timeout=max(0.0, self.deadline - time.monotonic()))
        except queue.Empty:
            raise OverLimit(f"no answer within the episode's {self.wall_s:g} s", limit="wall_s") from None
        finally:
            with self._lock:
                self._pending = None
        if answer is _STOP:
            raise OverLimit(self._stopped)
        assert isinstance(answer, Completion)  # answer() puts nothing else
        return answer

    def answer(self, call: PendingCall, completion: Completion) -> None:
        """Answer ``call`` (from the driver's thread)."""
        call.answer.put_nowait(completion)

    def stop(self, why: str) -> None:
        """Refuse the pending call, if any, and every later call with ``why``; safe to call twice."""
        with self._lock:
            self._stopped = self._stopped or why
            if self._pending is not None and self._pending.answer.empty():
                self._pending.answer.put_nowait(_STOP)


ACTION_KEYS = frozenset({"content", "tool_calls"})


def completion_of(action: Any, turn: int) -> Completion:
    """The Completion a driver's action stands for.

    ``action``: the reply text (str), or the assistant message ``{"content": str | None, "tool_calls": [...]}``
    as a dict or as JSON text (an object whose keys are among ``content`` and ``tool_calls``). Each tool call is
    OpenAI's ``{"id"?, "type"?: "function", "function": {"name", "arguments"}}`` or the flat
    ``{"id"?, "name", "arguments"}``; ``arguments`` is a JSON object or its text; a missing id becomes
    ``call_{turn}_{i}``. A message that cannot be read (a tool call without a name, arguments that are not a
    JSON object, JSON text cut short) is answered as text, whole, with the reason in
    :attr:`Completion.parse_error`, as the gateway answers a sampled reply whose tool calls it cannot read
    (tool_text.py). Raises TypeError for an action that is neither str nor dict."""
    if isinstance(action, dict):
        text, message = json.dumps(action), action
    elif isinstance(action, str):
        text, message = action, None
        stripped = action.strip()
        if stripped.startswith("{"):
            try:
                parsed = json.loads(stripped)
            except ValueError as exc:
                if '"tool_calls"' in stripped[:200] or stripped.startswith('{"content"'):
                    return Completion(
                        text=action, parse_error=f"the action looks like a JSON message but is not JSON: {exc}"
                    )
                parsed = None
            if isinstance(parsed, dict) and parsed and set(parsed) <= ACTION_KEYS:
                message = parsed
    else:
        raise TypeError(
            f"step(action): expected the reply text (str) or an assistant message {{'content': ..., 'tool_calls': "
            f"[...]}} (dict or its JSON text); found {type(action).__name__}"
        )
    if message is None:
        return Completion(text=action)
    try:
        content, calls = _read_message(message, turn)
    except ValueError as exc:
        return Completion(text=text, parse_error=str(exc))
    return Completion(text=content, tool_calls=calls, finish_reason="tool_calls" if calls else "stop")


def _read_message(message: dict[str, Any], turn: int) -> tuple[str, list[dict[str, Any]]]:
    unknown = sorted(set(message) - ACTION_KEYS)
    if unknown:
        raise ValueError(f"the action's message: expected the keys 'content' and 'tool_calls', found {unknown}")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError(f"the action's content: expected text or null, found {type(content).__name__}")
    listed = message.get("tool_calls") or []
    if not isinstance(listed, list):
        raise ValueError(f"the action's tool_calls: expected a list, found {type(listed).__name__}")
    calls = []
    for i, call in enumerate(listed):
        # OpenAI's nested form or the flat one; the name and arguments are read as a parsed reply's are
        function = call.get("function", call) if isinstance(call, dict) else call
        given = call.get("id") if isinstance(call, dict) else None
        call_id = given if isinstance(given, str) and given else f"call_{turn}_{i}"
        read = openai_call(i, function, "arguments", json.dumps(call), functools.partial(_given_id, call_id))
        if isinstance(read, str):
            raise ValueError(read)
        calls.append(read)
    return content or "", calls


def _given_id(call_id: str, _index: int) -> str:
    """The id a driver's tool call names (or its default), whatever the call's index."""
    return call_id
