"""The trainer configuration's policy sections: the model (``model``) and sampling from it (``generation``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .config_checks import check, check_literals


@dataclass
class ModelConfig:
    init: Literal["pretrained", "random"] = "random"
    """'pretrained': load weights from `path`; 'random': build a fresh model from the size fields below."""
    path: str = ""
    """Local folder of a Hugging Face causal LM (config.json + weights). Nothing is ever downloaded."""
    tokenizer: str = ""
    """Tokenizer folder, or 'builtin' (swebox's small tokenizer, built locally); empty: the model's folder
    when pretrained, 'builtin' when random."""
    architecture: str = "qwen2"
    """transformers model type of a random model (a key of CONFIG_MAPPING, e.g. qwen2, llama)."""
    hidden_size: int = 64
    """Width of a random model."""
    num_layers: int = 2
    """Transformer blocks of a random model."""
    num_heads: int = 4
    """Attention heads of a random model."""
    num_kv_heads: int = 4
    """Key/value heads of a random model (grouped-query attention when fewer than num_heads)."""
    intermediate_size: int = 128
    """MLP width of a random model."""
    max_position_embeddings: int = 4096
    """Longest sequence a random model accepts; must cover generation.max_context_tokens."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype of the policy; float32 on CPU, bfloat16 on GPU."""
    attn_implementation: Literal["eager", "sdpa", "flash_attention_2"] = "sdpa"
    """transformers attention kernel."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory, about 30% more compute."""

    def __post_init__(self) -> None:
        check_literals(self, "model")
        if self.init == "pretrained":
            check(
                bool(self.path),
                "model.path",
                "a model folder when model.init='pretrained'",
                self.path,
                "set model.path=/path/to/model or model.init=random",
            )
        check(
            self.num_heads > 0 and self.hidden_size % self.num_heads == 0,
            "model.hidden_size",
            f"a multiple of model.num_heads={self.num_heads}",
            self.hidden_size,
            "change either",
        )
        check(
            self.num_kv_heads > 0 and self.num_heads % self.num_kv_heads == 0,
            "model.num_kv_heads",
            f"a divisor of model.num_heads={self.num_heads}",
            self.num_kv_heads,
            "change either",
        )


@dataclass
class GenerationConfig:
    backend: Literal["transformers", "vllm", "openai"] = "transformers"
    """Who generates: transformers `generate` (CPU/GPU), vLLM (GPU), or an OpenAI-compatible server (eval)."""
    temperature: float = 1.0
    """Sampling temperature; GRPO needs > 0 so that a group's rollouts differ."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 keeps the whole distribution (the sampled logprobs stay exact)."""
    top_k: int = -1
    """Sample among the k most likely tokens; -1: no limit."""
    max_new_tokens: int = 256
    """Tokens the model may generate in one turn."""
    max_context_tokens: int = 4096
    """Prompt + all turns of an episode; reaching it ends the episode (see rollout.on_context_overflow)."""
    batch_size: int = 8
    """Sequences generated together in one call of the transformers backend, and the most prompts a generation
    server (placement 'server') merges into one engine call (raise it, e.g. to 256, for vLLM servers)."""
    batching: Literal["lockstep", "window"] = "lockstep"
    """How the transformers backend gathers episodes' turns into batches (trainers/policy/batching.py
    RequestBatcher). 'lockstep': a batch waits for every episode in flight and orders them by seed, so a seeded
    CPU run gives the same numbers whatever the machine's load (docs/training.md, "What the seed pins").
    'window': a batch leaves after batch_wait_s with whoever arrived (more throughput when episodes' commands
    take very different times; the numbers then depend on timing)."""
    batch_wait_s: float = 0.05
    """With batching 'window' (and in generation servers): longest a request waits for other episodes' requests
    to share its engine call (it runs as soon as every episode in flight, or batch_size prompts, are pending);
    0 runs whatever is pending."""
    vllm_gpu_memory_utilization: float = 0.5
    """Fraction of each GPU's memory vLLM may take (the learner shares the GPU when colocated)."""
    vllm_tensor_parallel_size: int = 1
    """GPUs one vLLM engine spans."""
    vllm_enforce_eager: bool = False
    """Disable CUDA graphs in vLLM: slower decoding, faster start and less memory."""
    openai_base_url: str = ""
    """Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (backend 'openai')."""
    openai_model: str = ""
    """Model name sent to the server (backend 'openai')."""
    openai_api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the server's API key (the key itself never goes in a config)."""
    openai_timeout_s: float = 600.0
    """Seconds one request to the server may take before it is retried (backend 'openai')."""
    openai_max_retries: int = 5
    """Retries of a request that timed out, lost its connection or got HTTP 408/409/429/5xx, with exponential
    backoff (the openai client's policy), before the episode errors (backend 'openai')."""
    tool_call_parser: Literal["hermes", "llama3_json", "mistral"] = "hermes"
    """The format the policy writes tool calls in when it answers a harness's ``tools`` (envs/gateway/
    tool_parsers.py; vLLM's ``--tool-call-parser`` of the same name): 'hermes' (``<tool_call>{...}</tool_call>``:
    Qwen2/2.5/3, the builtin tokenizer), 'llama3_json' (``{"name", "parameters"}`` objects: Llama 3.x), 'mistral'
    (``[TOOL_CALLS][...]``: Mistral before tokenizer v11). Pick the one the chat template teaches."""
    placement: Literal["actor", "server"] = "actor"
    """Where the policy runs on a Ray cluster. 'actor': every rollout actor owns a backend (and GPUs for vLLM);
    'server': generation.num_servers generation servers own the backends (on GPU nodes) and every rollout actor,
    GPU-less on any swebox node, generates through one of them (trainers/policy/gen_server.py). The in-process pool
    (no ray.address) always generates in-process."""
    num_servers: int = 1
    """Generation servers with placement 'server'; rollout actors are spread over them round-robin."""
    server_num_gpus: float = 0.0
    """GPUs of one transformers generation server (placement 'server'); 0 runs it on CPUs. A vLLM server takes
    vllm_tensor_parallel_size GPUs instead, so this must stay 0 with backend 'vllm'."""
    server_num_cpus: float = 1.0
    """CPUs Ray reserves for one generation server (placement 'server'); Ray sets the server's OMP_NUM_THREADS to
    it (at least 1), so a CPU transformers server computes with about that many threads."""

    def __post_init__(self) -> None:
        check_literals(self, "generation")
        check(self.temperature >= 0, "generation.temperature", ">= 0", self.temperature, "use 1.0 for GRPO")
        check(0 < self.top_p <= 1, "generation.top_p", "a value in (0, 1]", self.top_p, "use 1.0")
        check(self.top_k == -1 or self.top_k > 0, "generation.top_k", "-1 or > 0", self.top_k, "use -1")
        check(
            0 < self.max_new_tokens < self.max_context_tokens,
            "generation.max_new_tokens",
            f"in (0, max_context_tokens={self.max_context_tokens})",
            self.max_new_tokens,
            "lower it or raise generation.max_context_tokens",
        )
        check(self.batch_size > 0, "generation.batch_size", "> 0", self.batch_size, "use 8")
        check(self.batch_wait_s >= 0, "generation.batch_wait_s", ">= 0 seconds", self.batch_wait_s, "use 0.05")
        check(
            0 < self.vllm_gpu_memory_utilization <= 1,
            "generation.vllm_gpu_memory_utilization",
            "a fraction in (0, 1]",
            self.vllm_gpu_memory_utilization,
            "use 0.5 when colocated",
        )
        check(self.num_servers >= 1, "generation.num_servers", ">= 1", self.num_servers, "use 1")
        check(
            self.server_num_gpus >= 0,
            "generation.server_num_gpus",
            ">= 0",
            self.server_num_gpus,
            "use 0 (CPU) or the GPUs one transformers server needs",
        )
        check(self.server_num_cpus >= 0, "generation.server_num_cpus", ">= 0", self.server_num_cpus, "use 1")
        if self.placement == "server":
            check(
                self.backend != "openai",
                "generation.placement",
                "'actor' with backend 'openai'",
                "server",
                "an OpenAI-compatible server is already a server: use placement 'actor', or backend "
                "transformers/vllm for swebox's own generation servers",
            )
            check(
                self.backend != "vllm" or self.server_num_gpus == 0,
                "generation.server_num_gpus",
                "0 with backend 'vllm' (a vLLM server takes vllm_tensor_parallel_size GPUs)",
                self.server_num_gpus,
                "set generation.vllm_tensor_parallel_size instead",
            )
        if self.backend == "openai":
            check(
                bool(self.openai_base_url),
                "generation.openai_base_url",
                "a URL for backend 'openai'",
                self.openai_base_url,
                "set generation.openai_base_url=http://HOST:PORT/v1",
            )
