"""What the model gateway asks of a model, what it records of each call, and its limits.

The gateway (server.py) speaks OpenAI's chat completions to the harness; a :class:`ChatModel` answers it. The
trainer's answer is the policy (trainers/gateway_model.py: token ids in, token ids and log-probabilities out);
evaluation and tests may answer with a scripted model. Each call becomes one :class:`CallRecord`, the unit the
trainer learns from: the exact prompt ids the model saw and the exact ids it sampled.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass
class Completion:
    """One answer of a model to a list of chat messages."""

    text: str
    """The assistant message's content, as the harness receives it."""
    prompt_ids: list[int] = field(default_factory=list)
    """The token ids the model was given (the chat template applied to the messages); empty for a model
    without tokens (a scripted one)."""
    token_ids: list[int] = field(default_factory=list)
    """The token ids it sampled, exactly as sampled."""
    logprobs: list[float] = field(default_factory=list)
    """log p of each sampled id under the sampling distribution, aligned with ``token_ids``."""
    finish_reason: str = "stop"
    """"stop" (the model ended its turn) or "length" (its token budget ran out)."""
    template: str = ""
    """The chat template that turned the messages into ``prompt_ids`` (the tokenizer's Jinja source)."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """The tool calls of the reply, in OpenAI's format (``{"id", "type": "function", "function": {"name",
    "arguments": <JSON text>}}``); empty for a text reply. The harness runs them and sends each result back as a
    ``tool`` message naming the call's id."""
    parse_error: str = ""
    """Why the sampled text's tool calls were not read (envs/gateway/tool_parsers.py: malformed JSON, no name, a
    call cut short), in which case the reply went back as text; '' otherwise."""

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"Completion: expected one logprob per sampled token; found {len(self.token_ids)} "
                f"tokens and {len(self.logprobs)} logprobs"
            )
        if self.finish_reason not in ("stop", "length", "tool_calls"):
            raise ValueError(
                f"Completion.finish_reason: expected 'stop', 'length' or 'tool_calls', found {self.finish_reason!r}"
            )
        for call in self.tool_calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not (
                isinstance(function, dict)
                and isinstance(call.get("id"), str)
                and isinstance(function.get("name"), str)
                and isinstance(function.get("arguments"), str)
            ):
                raise ValueError(
                    "Completion.tool_calls: expected {id, type: 'function', function: {name, arguments: JSON "
                    f"text}} per call, found {call!r}"
                )


class OverLimit(Exception):
    """A model's refusal to answer a call within its own bounds (e.g. the prompt fills its context): the harness
    gets the gateway's limit error (HTTP 403), as for the gateway's own limits."""

    limit = "model"
    """The limit the call's record names (:attr:`CallRecord.limit`): ``model`` (the model's own bound) unless the
    refusal is one of the episode's limits (the handoff model of handoff.py refuses past ``wall_s``)."""

    def __init__(self, message: str = "", limit: str = "") -> None:
        super().__init__(message)
        if limit:
            self.limit = limit


class BadRequest(Exception):
    """A request the model cannot answer as asked (a field value it does not support, e.g. a ``tool_choice`` the
    policy cannot enforce): the harness gets HTTP 400 with an OpenAI error body (``invalid_request_error``),
    which OpenAI clients do not retry, and the call is recorded as refused."""


TRANSPORT_FIELDS = ("messages", "model", "stream", "stream_options", "user", "metadata", "store")
"""Request fields that do not change what the model answers: ``messages`` is kept on its own; ``model`` is a
name (the gateway serves one model whatever the harness calls it); ``stream`` and ``stream_options`` say how
the answer travels (whole or in chunks), not what it is; ``user``, ``metadata`` and ``store`` are bookkeeping.
Every other field is kept in :attr:`CallRecord.request` (``tools``, ``tool_choice``, ``max_tokens``, sampling
parameters, ``response_format``, a server's extra fields such as ``chat_template_kwargs``...): each may change
the answer, so a replay (replay.py) compares them all."""


def request_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The fields of a chat completions request body, other than :data:`TRANSPORT_FIELDS`."""
    return {k: v for k, v in body.items() if k not in TRANSPORT_FIELDS}


class ChatModel(Protocol):
    """Whoever answers the gateway's calls."""

    def complete(
        self, messages: list[dict[str, Any]], max_tokens: int | None, seed: int | None, request: dict[str, Any]
    ) -> Completion:
        """The assistant's reply to ``messages`` (OpenAI chat format), at most ``max_tokens`` sampled tokens
        (None: the model's own budget), sampled with ``seed`` (None: the model's own randomness). ``request``:
        the call's other fields (:func:`request_fields`: ``tools``, sampling parameters...), as sent."""
        ...


@dataclass
class GatewayLimits:
    """What one episode's harness may spend through the gateway. A call past a limit gets HTTP 403 with an
    OpenAI-style error body (``type: "limit_exceeded"``), which OpenAI clients do not retry."""

    max_calls: int = 50
    """Most model calls in one episode."""
    max_tokens: int = 32_768
    """Most sampled tokens in one episode, all calls together; a call asks for at most what is left."""
    wall_s: float = 600.0
    """Seconds from the gateway's start after which every call is refused (the harness's own run is bounded by
    the episode's time limit as well)."""

    def __post_init__(self) -> None:
        for name in ("max_calls", "max_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"GatewayLimits.{name}: expected a whole number >= 1, found {value!r}")
        if not isinstance(self.wall_s, (int, float)) or self.wall_s <= 0:
            raise ValueError(f"GatewayLimits.wall_s: expected seconds > 0, found {self.wall_s!r}")


@dataclass
class CallRecord:
    """One model call through the gateway, as the trainer and the viewer read it."""

    index: int
    """0 for the episode's first call."""
    messages: list[dict[str, Any]]
    """The chat messages the harness sent, as sent."""
    completion: Completion | None
    """The model's answer; None when the call was refused (``error`` says why)."""
    started_s: float
    """Seconds from the gateway's start to the call's arrival."""
    seconds: float
    """How long the model took to answer."""
    error: str = ""
    """Why the call got an error instead of an answer (a limit, a malformed request, a model failure)."""
    request: dict[str, Any] = field(default_factory=dict)
    """The request's fields other than the messages and :data:`TRANSPORT_FIELDS`, as sent (``tools``,
    ``max_tokens``, ``temperature``...)."""
    limit: str = ""
    """The limit that refused the call: a :class:`GatewayLimits` field (``max_calls``, ``max_tokens``,
    ``wall_s``) or ``model`` (the model's own bound, or a replay's pause or divergence); '' otherwise."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
