"""Generation backends: the policy samples token ids and their logprobs, whoever runs it.

Token in, token out: a backend takes prompts as token ids and returns the generated ids exactly as sampled,
with the log-probability of each under the sampling distribution (temperature, top-k and top-p applied).
The rollout code never re-tokenises model text, so the ids the learner trains on are the ids that were
sampled. Backends, chosen by ``generation.backend``:

- ``transformers``: ``model.generate`` on the learner's device (CPU or GPU), batched; concurrent callers
  (episodes running in threads) are gathered into one batch (:class:`RequestBatcher`), and each sequence
  samples from its own seeded stream (trainers/policy/sampling.py).
- ``vllm``: a vLLM engine (GPU, ``pip install swebox[vllm]``); new weights are loaded in place.
- ``openai``: an OpenAI-compatible HTTP server, for evaluating a served model (it cannot take weights).

The contract (:class:`Generated`, :class:`GenerationBackend`, :class:`BatchingBackend`) is in
trainers/policy/generation_api.py, the batcher in trainers/policy/batching.py, the backends in
trainers/policy/backends.py; this module chooses one (:func:`make_backend`) and re-exports their names.
"""

from __future__ import annotations

from typing import Any

from swebox.trainers.policy.backends import OpenAIBackend, TransformersBackend, VLLMBackend
from swebox.trainers.policy.batching import RequestBatcher
from swebox.trainers.policy.generation_api import BatchingBackend, FinishReason, Generated, GenerationBackend
from swebox.trainers.run.config import GenerationConfig

__all__ = [
    "BatchingBackend",
    "FinishReason",
    "Generated",
    "GenerationBackend",
    "OpenAIBackend",
    "RequestBatcher",
    "TransformersBackend",
    "VLLMBackend",
    "make_backend",
]


def make_backend(
    cfg: GenerationConfig, model: Any | None = None, tokenizer: Any | None = None, model_path: str = ""
) -> GenerationBackend:
    """The backend ``cfg.backend`` names. transformers needs ``model`` and ``tokenizer``; vllm needs a model
    folder (``model_path``) and the tokenizer; openai needs only the config."""
    if cfg.backend == "transformers":
        if model is None or tokenizer is None:
            raise ValueError(
                "generation.backend=transformers: expected a model and a tokenizer; found "
                f"model={type(model).__name__}, tokenizer={type(tokenizer).__name__}; build them with "
                "swebox.trainers.policy.models.build_model / build_tokenizer"
            )
        return TransformersBackend(model, tokenizer, cfg)
    if cfg.backend == "vllm":
        if not model_path:
            raise ValueError(
                "generation.backend=vllm: expected a local model folder; found none; set model.path (or save "
                "the random policy with save_pretrained and pass its folder)"
            )
        return VLLMBackend(model_path, tokenizer, cfg)
    if cfg.backend == "openai":
        return OpenAIBackend(cfg, tokenizer)
    raise ValueError(
        f"generation.backend: expected transformers, vllm or openai; found {cfg.backend!r}; pick one of them"
    )
