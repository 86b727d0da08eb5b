"""What a generation backend returns and promises: :class:`Generated` (one sampled continuation, ids and their
logprobs), :class:`GenerationBackend` (token ids in, token ids out) and :class:`BatchingBackend` (one that gathers
concurrent callers). The backends are in trainers/policy/backends.py; the overview and ``make_backend`` in
trainers/policy/generation.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

FinishReason = Literal["stop", "length"]


@dataclass
class Generated:
    """One sampled continuation."""

    token_ids: list[int]
    """The generated ids as sampled, ending with the end-of-turn token when finish_reason is 'stop'."""
    logprobs: list[float]
    """log p(token) under the sampling distribution, one per token id."""
    finish_reason: FinishReason
    """'stop': the model ended its turn; 'length': max_new_tokens ran out first."""

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"Generated: expected one logprob per token; found {len(self.token_ids)} tokens and "
                f"{len(self.logprobs)} logprobs; a backend must return them aligned"
            )


class GenerationBackend(Protocol):
    """What the rollout code needs from whoever samples the policy."""

    def generate(
        self, prompts: list[list[int]], max_new_tokens: int, seeds: list[int] | None = None
    ) -> list[Generated]:
        """One continuation per prompt (token ids), at most ``max_new_tokens`` each, in prompt order. ``seeds``:
        one sampling seed per prompt (trainers/policy/sampling.py ``sample_seed``); a backend that can samples each
        prompt from its own stream, so that a prompt's continuation depends on its seed, not on its
        batch-mates. None: the backend's own randomness."""
        ...

    def update_weights(self, state_dict_or_model: Any) -> None:
        """Sample from these weights from now on (a state dict or a module with one)."""
        ...


@runtime_checkable
class BatchingBackend(GenerationBackend, Protocol):
    """A backend that gathers concurrent callers into one batch (TransformersBackend): the rollout worker says
    how many episodes are in flight, so that a batch waits for their turns (:class:`RequestBatcher`)."""

    def join(self, callers: int) -> None:
        """``callers`` episodes start; each calls :meth:`leave` when it ends."""
        ...

    def leave(self) -> None:
        """One episode that joined has ended."""
        ...
