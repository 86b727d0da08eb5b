"""Seeded sampling per sequence: what a sequence samples depends on its own seed, not on its batch-mates.

``transformers``' ``generate`` samples every row of a batch from torch's one global generator, so the tokens of
an episode depend on which other episodes shared its batch and in what order, which depends on the machine's
timing. Here each row draws from its own ``torch.Generator`` seeded by :func:`sample_seed` (the run's seed, the
weights' version, the task, the sample's index, the turn), by the Gumbel-max trick: ``argmax(logp + g)`` with
``g`` standard Gumbel noise is an exact sample from ``softmax(logp)``, and ``generate`` already takes the argmax
when it decodes greedily. The processors in front (temperature, top-k, top-p) are transformers' own, so the
distribution is the one ``do_sample=True`` would sample, and the recorded logprobs are that distribution's.
"""

from __future__ import annotations

import hashlib
import struct

import torch


def sample_seed(*parts: object) -> int:
    """A 63-bit seed from ``parts`` (ints and strings), the same in every process and on every machine.

    Python's ``hash()`` of a string changes per process (PYTHONHASHSEED), so the parts are hashed with BLAKE2b.
    """
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return struct.unpack("<Q", digest)[0] >> 1


def gumbel_noise(generator: torch.Generator, size: int) -> torch.Tensor:
    """``size`` standard Gumbel draws from ``generator`` (float32, CPU)."""
    uniform = torch.rand(size, generator=generator).clamp_(min=torch.finfo(torch.float32).tiny)
    return -torch.log(-torch.log(uniform))


class SeededGumbel:
    """The last logits processor of a greedy ``generate``: records ``log_softmax`` of the processed scores (the
    sampling distribution) and returns them plus per-row Gumbel noise, so that greedy decoding samples.

    ``seeds[i]`` seeds row ``i``'s generator; every decoding step draws one noise vector per row, finished rows
    included, so a row's draws never depend on how long its batch-mates run.
    """

    def __init__(self, seeds: list[int]) -> None:
        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.logprobs: list[torch.Tensor] = []
        """One [rows, vocab] tensor per decoding step: the sampling distribution's log-probabilities."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(scores.float(), dim=-1)
        self.logprobs.append(logp.cpu())
        noise = torch.stack([gumbel_noise(g, logp.shape[-1]) for g in self.generators]).to(logp.device)
        return logp + noise
