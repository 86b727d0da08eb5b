"""The generation backends: transformers (``model.generate``, batched by :class:`RequestBatcher`), vLLM (an
in-process engine) and an OpenAI-compatible server. trainers/policy/generation.py says which is for what and
chooses one (``make_backend``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import torch
from swebox.trainers.policy.batching import RequestBatcher
from swebox.trainers.policy.generation_api import FinishReason, Generated
from swebox.trainers.policy.sampling import SeededGumbel
from swebox.trainers.run.config import GenerationConfig
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper


def _state_dict(state_dict_or_model: Any) -> dict[str, torch.Tensor]:
    if isinstance(state_dict_or_model, torch.nn.Module):
        return state_dict_or_model.state_dict()
    return dict(state_dict_or_model)


def _warpers(cfg: GenerationConfig) -> list[Any]:
    """transformers' own temperature, top-k and top-p processors, in the order its sampling applies them."""
    warpers: list[Any] = [TemperatureLogitsWarper(cfg.temperature)]
    if cfg.top_k > 0:
        warpers.append(TopKLogitsWarper(cfg.top_k))
    if cfg.top_p < 1.0:
        warpers.append(TopPLogitsWarper(cfg.top_p))
    return warpers


# ------------------------------------------------------------------------------------- transformers


class TransformersBackend:
    """``model.generate`` with sampling; logprobs from the processed (temperature/top-k/top-p) scores.

    The model is used as given (the learner's own module in a single process, or a rollout worker's copy);
    ``update_weights`` copies a state dict into it.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, cfg: GenerationConfig) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.eos_token_id = int(tokenizer.eos_token_id)
        self.pad_token_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_id)
        self._batcher = RequestBatcher(
            self._generate_batch, cfg.batch_size, cfg.batch_wait_s, lockstep=cfg.batching == "lockstep"
        )
        self._weights_lock = threading.Lock()

    def generate(
        self, prompts: list[list[int]], max_new_tokens: int, seeds: list[int] | None = None
    ) -> list[Generated]:
        return self._batcher.submit(prompts, max_new_tokens, seeds)

    def join(self, callers: int) -> None:
        """``callers`` episodes start: a batch waits for their requests (:class:`RequestBatcher`)."""
        self._batcher.join(callers)

    def leave(self) -> None:
        """One episode that joined has ended."""
        self._batcher.leave()

    def update_weights(self, state_dict_or_model: Any) -> None:
        state = _state_dict(state_dict_or_model)
        if state_dict_or_model is self.model:
            return
        with self._weights_lock, torch.no_grad():
            self.model.load_state_dict(state)

    @torch.no_grad()
    def _generate_batch(
        self, prompts: list[list[int]], max_new_tokens: int, seeds: list[int] | None = None
    ) -> list[Generated]:
        out: list[Generated] = []
        for start in range(0, len(prompts), self.cfg.batch_size):
            chunk = slice(start, start + self.cfg.batch_size)
            out += self._generate_chunk(prompts[chunk], max_new_tokens, seeds[chunk] if seeds is not None else None)
        return out

    def _generate_chunk(
        self, prompts: list[list[int]], max_new_tokens: int, seeds: list[int] | None
    ) -> list[Generated]:
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: every prompt ends at the last column
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        sampling = self.cfg.temperature > 0
        kwargs: dict[str, Any] = {"do_sample": sampling and seeds is None, "output_scores": True}
        seeded = None
        if sampling and seeds is not None:  # greedy decoding of Gumbel-perturbed scores: a seeded sample per row
            seeded = SeededGumbel(seeds)
            kwargs.update(output_scores=False, logits_processor=LogitsProcessorList([*_warpers(self.cfg), seeded]))
        elif sampling:
            kwargs.update(
                temperature=self.cfg.temperature,
                top_p=self.cfg.top_p,
                top_k=self.cfg.top_k if self.cfg.top_k > 0 else 0,
            )
        was_training = self.model.training
        self.model.eval()
        with self._weights_lock:
            result = self.model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max_new_tokens,
                eos_token_id=self.eos_token_id,
                pad_token_id=self.pad_token_id,
                return_dict_in_generate=True,
                **kwargs,
            )
        self.model.train(was_training)
        new = result.sequences[:, width:].cpu()
        # the sampling distribution's logprobs: recorded by the seeded sampler, or log_softmax of the scores
        # after the sampling processors
        steps = seeded.logprobs if seeded is not None else [s.float().cpu() for s in result.scores]
        logp = torch.log_softmax(torch.stack(steps, dim=1), dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        return [self._trim(new[i].tolist(), logp[i].tolist()) for i in range(len(prompts))]

    def _trim(self, tokens: list[int], logprobs: list[float]) -> Generated:
        if self.eos_token_id in tokens:
            end = tokens.index(self.eos_token_id) + 1
            return Generated(tokens[:end], logprobs[:end], "stop")
        return Generated(tokens, logprobs, "length")


# --------------------------------------------------------------------------------------------- vLLM


class VLLMBackend:
    """A vLLM engine in this process (GPU). Weights are loaded in place after each update.

    The engine loads the model from ``model_path`` (a local folder: the pretrained policy, or the random
    policy saved with ``save_pretrained``); ``update_weights`` then streams the learner's tensors into the
    engine's model with its ``load_weights`` and drops the prefix cache, whose entries the old weights made.
    """

    def __init__(self, model_path: str, tokenizer: Any, cfg: GenerationConfig, dtype: str = "bfloat16") -> None:
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ImportError(
                "generation.backend=vllm: expected the vllm package; found it missing; "
                "install it with `pip install 'swebox[vllm]'` on a GPU machine"
            ) from exc
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.llm = LLM(
            model=model_path,
            dtype=dtype,
            gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
            tensor_parallel_size=cfg.vllm_tensor_parallel_size,
            enforce_eager=cfg.vllm_enforce_eager,
            max_model_len=cfg.max_context_tokens,
            enable_prefix_caching=True,
        )

    def generate(
        self, prompts: list[list[int]], max_new_tokens: int, seeds: list[int] | None = None
    ) -> list[Generated]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        def params(seed: int | None) -> Any:
            return SamplingParams(
                max_tokens=max_new_tokens,
                temperature=self.cfg.temperature,
                top_p=self.cfg.top_p,
                top_k=self.cfg.top_k,
                logprobs=0,  # the sampled token's own logprob (after temperature and truncation)
                stop_token_ids=[int(self.tokenizer.eos_token_id)],
                seed=seed,  # vLLM's per-request generator: a sample no longer depends on its batch-mates' draws
            )

        per_prompt = [params(s) for s in seeds] if seeds is not None else params(None)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], per_prompt, use_tqdm=False)
        results = []
        for output in outputs:
            completion = output.outputs[0]
            tokens = list(completion.token_ids)
            logprobs = [float(step[t].logprob) for step, t in zip(completion.logprobs, tokens, strict=True)]
            reason: FinishReason = "stop" if completion.finish_reason == "stop" else "length"
            results.append(Generated(tokens, logprobs, reason))
        return results

    def update_weights(self, state_dict_or_model: Any) -> None:
        state = _state_dict(state_dict_or_model)
        _vllm_model(self.llm).load_weights(weights=state.items())
        self.llm.reset_prefix_cache()


def _vllm_model(llm: Any) -> Any:
    """The engine's torch module, where vLLM keeps it in-process (its layout changed across versions)."""
    executor = llm.llm_engine.model_executor
    for path in ("driver_worker.worker.model_runner.model", "driver_worker.model_runner.model"):
        obj = executor
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            continue
    raise RuntimeError(
        "vLLM: expected the model in-process (driver_worker.*.model_runner.model); found another layout; "
        "set VLLM_ENABLE_V1_MULTIPROCESSING=0 and use tensor_parallel_size=1, or a vLLM version with that layout"
    )


# ------------------------------------------------------------------------------------------- OpenAI


TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls")
"""The chat completions request fields that :meth:`OpenAIBackend.chat_reply` passes on to the server as sent: a
function-calling harness's tools, and its say over whether and how many of them the model calls."""


@dataclass
class ServedReply:
    """A served model's answer to one chat completions request."""

    text: str
    """The assistant message's content ('' for null, as with tool calls only)."""
    tool_calls: list[dict[str, Any]]
    """The reply's tool calls in OpenAI's format (``{"id", "type": "function", "function": {"name",
    "arguments"}}``, the arguments the server's JSON text unchanged); empty for a text reply."""
    finish_reason: str
    """"stop", "length" or "tool_calls", as the server said ("function_call" read as "tool_calls", any other
    reason as "stop")."""


def _function_call(call: Any, base_url: str) -> dict[str, Any]:
    function = getattr(call, "function", None)
    if getattr(call, "type", "function") != "function" or function is None:
        raise ValueError(
            f"OpenAI server {base_url}: expected function tool calls; found a {getattr(call, 'type', '?')!r} "
            "call; offer the model function tools only"
        )
    return {"id": call.id, "type": "function", "function": {"name": function.name, "arguments": function.arguments}}


class OpenAIBackend:
    """An OpenAI-compatible HTTP server (vLLM, SGLang, TGI, ...) for evaluation; it cannot take weights.

    Requests go through the official ``openai`` client: a timeout per request, and retries with exponential
    backoff on timeouts, lost connections and HTTP 408/409/429/5xx (``openai_max_retries``), so one 503 in a
    long evaluation is a retry, not an errored task. ``chat(messages)`` is the natural call for an evaluation
    loop. ``generate(prompts)`` serves the token interface through ``/completions``: the prompt ids are decoded
    with ``tokenizer`` (use the served model's tokenizer) and the reply is encoded again, so ids are
    approximate, and logprobs are the server's when it returns them (0 otherwise). Never train on them.
    """

    def __init__(self, cfg: GenerationConfig, tokenizer: Any | None = None) -> None:
        import openai

        self.cfg = cfg
        self.tokenizer = tokenizer
        self.base_url = cfg.openai_base_url.rstrip("/")
        # vLLM and most local servers need no key, but the client insists on one
        self.client = openai.OpenAI(
            base_url=self.base_url,
            api_key=os.environ.get(cfg.openai_api_key_env) or "none",
            timeout=cfg.openai_timeout_s,
            max_retries=cfg.openai_max_retries,
        )

    def _call(self, create, route: str, **body: Any) -> Any:
        import openai

        try:
            return create(**body)
        except openai.APIStatusError as exc:
            raise RuntimeError(
                f"OpenAI server {self.base_url}/{route}: expected HTTP 200; found {exc.status_code} after "
                f"{self.cfg.openai_max_retries} retries: {str(exc.message)[:500]}; check "
                "generation.openai_base_url and generation.openai_model"
            ) from exc
        except openai.APIConnectionError as exc:  # also timeouts
            raise RuntimeError(
                f"OpenAI server {self.base_url}/{route}: no answer after {self.cfg.openai_max_retries} retries "
                f"({type(exc).__name__}: {exc}); check that the server runs and generation.openai_timeout_s"
            ) from exc

    def _sampling(self, max_new_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.cfg.openai_model,
            "max_tokens": max_new_tokens,
            "temperature": self.cfg.temperature,
            "top_p": self.cfg.top_p,
        }
        if self.cfg.top_k > 0:
            body["extra_body"] = {"top_k": self.cfg.top_k}  # an extension most servers accept
        return body

    def chat(self, messages: list[dict[str, str]], max_new_tokens: int | None = None) -> tuple[str, FinishReason]:
        """The server's reply to a conversation, and why it ended."""
        reply = self.chat_reply(messages, max_new_tokens)
        return reply.text, "length" if reply.finish_reason == "length" else "stop"

    def chat_reply(
        self, messages: list[dict[str, Any]], max_new_tokens: int | None = None, fields: dict[str, Any] | None = None
    ) -> ServedReply:
        """The server's whole reply to a conversation (its text, its tool calls, why it ended). ``fields``: the
        request's function-calling fields (:data:`TOOL_FIELDS`) sent as they are; any other key is refused."""
        extra = dict(fields or {})
        unknown = sorted(set(extra) - set(TOOL_FIELDS))
        if unknown:
            raise ValueError(f"OpenAIBackend.chat_reply: expected fields among {TOOL_FIELDS}; found {unknown}")
        reply = self._call(
            self.client.chat.completions.create,
            "chat/completions",
            messages=messages,
            **extra,
            **self._sampling(max_new_tokens or self.cfg.max_new_tokens),
        )
        choice = reply.choices[0]
        calls = [_function_call(call, self.base_url) for call in choice.message.tool_calls or []]
        # OpenAI's finish reasons as the gateway's Completion takes them: the legacy "function_call" is a tool
        # call; "content_filter" (and any server's own reason) ended the reply like a stop
        reason = choice.finish_reason
        finish = reason if reason in ("stop", "length", "tool_calls") else "tool_calls" if calls else "stop"
        return ServedReply(choice.message.content or "", calls, finish)

    def generate(
        self, prompts: list[list[int]], max_new_tokens: int, seeds: list[int] | None = None
    ) -> list[Generated]:
        if self.tokenizer is None:
            raise ValueError("OpenAIBackend.generate: expected a tokenizer; found None; pass the served model's")
        results = []
        for i, prompt in enumerate(prompts):
            seed = {"seed": seeds[i]} if seeds is not None else {}  # OpenAI's best-effort reproducible sampling
            reply = self._call(
                self.client.completions.create,
                "completions",
                prompt=self.tokenizer.decode(prompt),
                logprobs=1,
                **seed,
                **self._sampling(max_new_tokens),
            )
            choice = reply.choices[0]
            tokens = self.tokenizer.encode(choice.text or "", add_special_tokens=False)
            server_logprobs = (choice.logprobs.token_logprobs if choice.logprobs else None) or []
            aligned = len(server_logprobs) == len(tokens)
            logprobs = [float(x) for x in server_logprobs] if aligned else [0.0] * len(tokens)
            reason: FinishReason = "length" if choice.finish_reason == "length" else "stop"
            results.append(Generated(tokens, logprobs, reason))
        return results

    def update_weights(self, state_dict_or_model: Any) -> None:
        raise NotImplementedError(
            "generation.backend=openai: a served model cannot receive weights; use it for `swebox eval`, and "
            "train with backend transformers or vllm"
        )
