"""The trainer's configuration: one typed dataclass per part, loaded from YAML with dotted overrides.

``configs/*.yaml`` files set the fields of :class:`TrainConfig` 1:1 (no keys of their own); command-line
overrides use dotted keys (``algorithm.clip_high=0.28``). Unknown keys are rejected with the list of
valid ones; values are type-checked by OmegaConf; invariants are checked in each ``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from swebox.envs.episodes.episode import EpisodeConfig
from swebox.envs.gateway.calls import GatewayLimits
from swebox.envs.gateway.harness import HarnessConfig, episode_config
from swebox.envs.sandbox import SandboxError

from . import yaml12

# The algorithm's choices, named here so that loading a config never imports torch; grpo.py uses them too.
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3"]


# env.calibration_order's values (envs/tasks/calibrate_select.ORDERS; named here so that configs load without it).
CALIBRATION_ORDERS = ("none", "easy_first", "hard_first")


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message says what was expected and how to fix it."""


def _check(ok: bool, key: str, expected: str, found: object, fix: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: expected {expected}; found {found!r}; {fix}")


def _check_literals(obj: object, section: str) -> None:
    """Literal-typed fields hold one of their values (OmegaConf checks YAML; this covers direct use)."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        if typing.get_origin(hints[f.name]) is Literal:
            allowed = list(typing.get_args(hints[f.name]))
            value = getattr(obj, f.name)
            _check(value in allowed, f"{section}.{f.name}", f"one of {allowed}", value, "pick one of them")


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
        _check_literals(self, "model")
        if self.init == "pretrained":
            _check(
                bool(self.path),
                "model.path",
                "a model folder when model.init='pretrained'",
                self.path,
                "set model.path=/path/to/model or model.init=random",
            )
        _check(
            self.num_heads > 0 and self.hidden_size % self.num_heads == 0,
            "model.hidden_size",
            f"a multiple of model.num_heads={self.num_heads}",
            self.hidden_size,
            "change either",
        )
        _check(
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
        _check_literals(self, "generation")
        _check(self.temperature >= 0, "generation.temperature", ">= 0", self.temperature, "use 1.0 for GRPO")
        _check(0 < self.top_p <= 1, "generation.top_p", "a value in (0, 1]", self.top_p, "use 1.0")
        _check(self.top_k == -1 or self.top_k > 0, "generation.top_k", "-1 or > 0", self.top_k, "use -1")
        _check(
            0 < self.max_new_tokens < self.max_context_tokens,
            "generation.max_new_tokens",
            f"in (0, max_context_tokens={self.max_context_tokens})",
            self.max_new_tokens,
            "lower it or raise generation.max_context_tokens",
        )
        _check(self.batch_size > 0, "generation.batch_size", "> 0", self.batch_size, "use 8")
        _check(self.batch_wait_s >= 0, "generation.batch_wait_s", ">= 0 seconds", self.batch_wait_s, "use 0.05")
        _check(
            0 < self.vllm_gpu_memory_utilization <= 1,
            "generation.vllm_gpu_memory_utilization",
            "a fraction in (0, 1]",
            self.vllm_gpu_memory_utilization,
            "use 0.5 when colocated",
        )
        _check(self.num_servers >= 1, "generation.num_servers", ">= 1", self.num_servers, "use 1")
        _check(
            self.server_num_gpus >= 0,
            "generation.server_num_gpus",
            ">= 0",
            self.server_num_gpus,
            "use 0 (CPU) or the GPUs one transformers server needs",
        )
        _check(self.server_num_cpus >= 0, "generation.server_num_cpus", ">= 0", self.server_num_cpus, "use 1")
        if self.placement == "server":
            _check(
                self.backend != "openai",
                "generation.placement",
                "'actor' with backend 'openai'",
                "server",
                "an OpenAI-compatible server is already a server: use placement 'actor', or backend "
                "transformers/vllm for swebox's own generation servers",
            )
            _check(
                self.backend != "vllm" or self.server_num_gpus == 0,
                "generation.server_num_gpus",
                "0 with backend 'vllm' (a vLLM server takes vllm_tensor_parallel_size GPUs)",
                self.server_num_gpus,
                "set generation.vllm_tensor_parallel_size instead",
            )
        if self.backend == "openai":
            _check(
                bool(self.openai_base_url),
                "generation.openai_base_url",
                "a URL for backend 'openai'",
                self.openai_base_url,
                "set generation.openai_base_url=http://HOST:PORT/v1",
            )


@dataclass
class AlgorithmConfig:
    norm_adv_by_std: bool = True
    """Divide advantages by the group's reward std: True is GRPO, False is Dr. GRPO."""
    adv_eps: float = 1e-6
    """Added to the std before dividing."""
    clip_low: float = 0.2
    """Lower clip of the ratio: 1 - clip_low."""
    clip_high: float = 0.28
    """Upper clip of the ratio: 1 + clip_high (DAPO's clip-higher when above clip_low)."""
    dual_clip_c: float | None = None
    """Dual clip bound c > 1 for negative advantages; null disables it."""
    loss_agg_mode: LossAggMode = "token-mean"
    """How token losses become one number (trainers/rl/grpo.py aggregate_loss)."""
    loss_norm_constant: int = 0
    """Denominator of 'seq-mean-token-sum-norm' (Dr. GRPO); 0: generation.max_context_tokens."""
    kl_beta: float = 0.0
    """Weight of the KL penalty to the reference model; 0 loads no reference model."""
    kl_estimator: KLEstimator = "k3"
    """KL estimator (trainers/rl/grpo.py kl_penalty)."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (subtracted from the loss); 0: entropy is only logged."""
    dynamic_sampling: bool = False
    """DAPO: train only on groups whose rewards differ, rolling out more groups to refill the batch."""
    max_sampling_rounds: int = 3
    """Rollout rounds per step when refilling; afterwards equal-reward groups fill the batch."""
    overlong_buffer_len: int = 0
    """DAPO soft overlong penalty: tokens before max_context_tokens where it ramps to -penalty; 0: off."""
    overlong_penalty_factor: float = 1.0
    """Reward subtracted at or beyond max_context_tokens (DAPO's penalty factor)."""
    mask_errored: bool = True
    """Mask trajectories whose environment failed (sandbox error, crash) out of the loss."""
    negative_advantage_scale: float = 1.0
    """Multiplies negative advantages (trainers/rl/grpo.py scale_negative_advantages): 1 is plain GRPO; below 1
    failed episodes push their text down less than resolved ones pull theirs up (configs/demo.yaml: 0)."""

    def __post_init__(self) -> None:
        _check_literals(self, "algorithm")
        _check(
            0 <= self.negative_advantage_scale <= 1,
            "algorithm.negative_advantage_scale",
            "in [0, 1]",
            self.negative_advantage_scale,
            "use 1 (plain GRPO)",
        )
        _check(0 <= self.clip_low < 1, "algorithm.clip_low", "a value in [0, 1)", self.clip_low, "use 0.2")
        _check(self.clip_high >= 0, "algorithm.clip_high", ">= 0", self.clip_high, "use 0.2 or 0.28 (DAPO)")
        _check(
            self.dual_clip_c is None or self.dual_clip_c > 1,
            "algorithm.dual_clip_c",
            "null or > 1",
            self.dual_clip_c,
            "use 3.0 or null",
        )
        _check(self.kl_beta >= 0, "algorithm.kl_beta", ">= 0", self.kl_beta, "use 0 (no reference model)")
        _check(
            self.max_sampling_rounds >= 1, "algorithm.max_sampling_rounds", ">= 1", self.max_sampling_rounds, "use 3"
        )
        _check(
            self.overlong_buffer_len >= 0,
            "algorithm.overlong_buffer_len",
            ">= 0",
            self.overlong_buffer_len,
            "use 0 to disable the penalty",
        )


@dataclass
class OptimConfig:
    lr: float = 1e-6
    """Peak learning rate of AdamW."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW betas."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Learning-rate shape after warm-up, over train.total_steps."""
    warmup_steps: int = 0
    """Steps of linear warm-up from 0 to lr."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this; 0 disables clipping (the norm is still logged)."""
    mini_batches: int = 1
    """Optimizer steps per rollout batch (the batch is split into this many mini-batches)."""
    micro_batch_size: int = 4
    """Trajectories per forward/backward; gradients accumulate over a mini-batch."""
    epochs: int = 1
    """Passes over each rollout batch (PPO epochs); > 1 makes the ratio and clipping matter."""
    moments_from: str = ""
    """A checkpoint folder (``.../checkpoints/step_N``) whose AdamW moments this run starts from, e.g. its SFT
    warm start's; empty: fresh moments. A fresh Adam's first update moves every weight by about ``lr`` (its
    moments are one gradient), which undoes a memorised warm start; the warm start's moments scale each weight's
    step by what its gradients have been (configs/demo.yaml, docs/training.md)."""

    def __post_init__(self) -> None:
        _check_literals(self, "optim")
        _check(self.lr > 0, "optim.lr", "> 0", self.lr, "use 1e-6 for a 7B model, 1e-4 for a tiny one")
        _check(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            "optim.betas",
            "two values in [0, 1)",
            self.betas,
            "use [0.9, 0.999]",
        )
        _check(self.grad_clip >= 0, "optim.grad_clip", ">= 0", self.grad_clip, "use 1.0")
        for key in ("mini_batches", "micro_batch_size", "epochs"):
            _check(getattr(self, key) >= 1, f"optim.{key}", ">= 1", getattr(self, key), "use 1")


@dataclass
class RolloutConfig:
    tasks_per_step: int = 4
    """Tasks (groups) per training step."""
    group_size: int = 4
    """Rollouts per task (G), all forked from the task's one prepared start."""
    max_parallel_episodes: int = 8
    """Episodes in flight at once across all rollout actors."""
    on_context_overflow: Literal["truncate", "mask", "penalize"] = "mask"
    """An episode that fills max_context_tokens: keep its reward, mask it (DAPO overlong filtering), or
    give it overflow_reward."""
    overflow_reward: float = 0.0
    """Reward of an overflowing episode when on_context_overflow='penalize'."""
    shuffle: bool = True
    """Visit the tasks in a seeded random order (each epoch reshuffled)."""
    max_error_frac: float = 0.5
    """A step whose share of errored episodes (environment failures, masked out of the loss) is above this stops
    the run with the failing tasks and their first errors (1.0: never); an agent's own failures never count."""

    def __post_init__(self) -> None:
        _check_literals(self, "rollout")
        _check(self.tasks_per_step >= 1, "rollout.tasks_per_step", ">= 1", self.tasks_per_step, "use 4")
        _check(
            self.group_size >= 2,
            "rollout.group_size",
            ">= 2 (advantages compare a group's rollouts)",
            self.group_size,
            "use 4 to 16",
        )
        _check(
            self.max_parallel_episodes >= 1,
            "rollout.max_parallel_episodes",
            ">= 1",
            self.max_parallel_episodes,
            "use the number of CPU cores",
        )
        _check(
            0 <= self.max_error_frac <= 1,
            "rollout.max_error_frac",
            "a fraction in [0, 1]",
            self.max_error_frac,
            "use 0.5 (1.0 never stops the run)",
        )


@dataclass
class EnvConfig(EpisodeConfig):
    """The environment: an :class:`~swebox.envs.episodes.episode.EpisodeConfig` (every field of it is a key of this
    section, with its name, default and docstring there: ``max_turns``, ``style``, ``time_limit_s``, ``max_obs_chars``,
    ``reward_mode``, ``sandbox``...; docs/envs.md lists them) plus the trainer's own keys below."""

    tasks: str = ""
    """Task set: a tasks.jsonl file (one task per line, the SWE-bench-style schema)."""
    calibration: str = ""
    """A calibration file (``swebox tasks calibrate``): tasks whose gold is not always resolved or whose empty diff
    ever resolved are left out, flaky tests quarantined, and a one-line summary printed; empty: no calibration."""
    calibration_order: str = "none"
    """A curriculum from env.calibration's policy entries (``swebox tasks calibrate --policy``): ``none`` (the
    tasks' own order), ``easy_first`` (highest solve rate first) or ``hard_first`` (lowest first); ties by task
    id, tasks without a policy entry last in their own order. When set, the order replaces rollout.shuffle: every
    epoch visits the tasks in this order."""
    layer_store: str = ""
    """Layer store folder the tasks' layers come from; empty: $SWEBOX_LAYER_STORE, else runs/layers."""
    cache_dir: str = ""
    """Node-local layer cache folder; empty: the cache's default."""
    grade_cache: bool = True
    """Reuse the verdict of a final diff already graded for the same task in this run (same files, same
    content; per rollout worker) instead of running the tests again (swebox.envs.episodes.grade_cache)."""
    grade_cache_size: int = 4096
    """Most verdicts one rollout worker keeps (least recently used go first)."""
    harness: str = ""
    """Who plays the episodes: "" (the text loop: the policy's replies parsed into actions), "mini-swe-agent" or
    "command:<shell command>" (an agent program in the sandbox whose model calls reach the policy through the
    episode's gateway; docs/envs.md, "Harness episodes")."""
    harness_install: str = ""
    """Host folder of the harness's install (a venv), bound read-only into the sandbox; see env.harness."""
    harness_max_calls: int = 50
    """Most model calls a harness episode may make (the gateway refuses the next with HTTP 403)."""
    harness_max_tokens: int = 32_768
    """Most tokens the policy may sample in one harness episode, all calls together."""

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
        except ConfigError:
            raise
        except ValueError as exc:  # the episode's own checks, said with this section's key
            raise ConfigError(str(exc).replace("EpisodeConfig.", "env.", 1)) from None
        except SandboxError as exc:  # a bad key or value in env.sandbox
            raise ConfigError(f"env.sandbox: {exc}") from None
        _check(self.grade_cache_size >= 1, "env.grade_cache_size", ">= 1", self.grade_cache_size, "use 4096")
        _check(
            self.calibration_order in CALIBRATION_ORDERS,
            "env.calibration_order",
            f"one of {', '.join(CALIBRATION_ORDERS)}",
            self.calibration_order,
            "pick one of them",
        )
        _check(
            self.calibration_order == "none" or bool(self.calibration),
            "env.calibration_order",
            "'none' without env.calibration (the order comes from its policy entries)",
            self.calibration_order,
            "set env.calibration=FILE (swebox tasks calibrate --policy) or leave the order at none",
        )
        if self.harness:
            try:
                self.harness_config()
            except ValueError as exc:
                raise ConfigError(
                    str(exc)
                    .replace("HarnessConfig.install", "env.harness_install")
                    .replace("HarnessConfig.", "env.")
                    .replace("GatewayLimits.max_", "env.harness_max_")
                ) from None

    def harness_config(self) -> HarnessConfig:
        """The harness env.harness names (docs/envs.md, "Harness episodes")."""
        return HarnessConfig(
            harness=self.harness,
            install=self.harness_install,
            limits=GatewayLimits(
                max_calls=self.harness_max_calls, max_tokens=self.harness_max_tokens, wall_s=self.time_limit_s
            ),
        )

    def episode(self) -> EpisodeConfig:
        """This section's EpisodeConfig fields: what every episode of the run gets (with env.harness, its install
        bound read-only into the sandbox)."""
        config = EpisodeConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(EpisodeConfig)})
        return episode_config(config, self.harness_config()) if self.harness else config


@dataclass
class RayConfig:
    address: str = ""
    """Cluster to join: '' starts a local one, 'auto' joins this machine's cluster, or 'HOST:PORT'."""
    num_cpus: int | None = None
    """CPUs of a local cluster; null: all of them. Ignored when joining a cluster."""
    namespace: str = "swebox"
    """Ray namespace of the trainer's actors."""
    actors_per_node: int = 1
    """Rollout actors per node; each owns a sandbox pool and uses the node's layer cache."""
    actor_num_cpus: float = 1.0
    """CPUs reserved by one rollout actor."""
    node_resource: str = "swebox_node"
    """Custom resource each swebox node advertises (scripts/ray_head.sh, ray_worker.sh); actors need it."""
    connect_timeout_s: float = 60.0
    """Seconds to join the cluster at ``address`` before stopping with an error (Ray alone retries for ever)."""

    def __post_init__(self) -> None:
        _check(self.connect_timeout_s > 0, "ray.connect_timeout_s", "> 0 seconds", self.connect_timeout_s, "use 60")
        _check(self.actors_per_node >= 1, "ray.actors_per_node", ">= 1", self.actors_per_node, "use 1")
        _check(self.actor_num_cpus > 0, "ray.actor_num_cpus", "> 0", self.actor_num_cpus, "use 1")
        _check(self.num_cpus is None or self.num_cpus >= 1, "ray.num_cpus", "null or >= 1", self.num_cpus, "use null")


@dataclass
class LoggingConfig:
    run_dir: str = "runs/grpo"
    """Folder of this run: metrics.jsonl, config.yaml, the wandb run, plots, checkpoints."""
    project: str = "swebox"
    """wandb project."""
    run_name: str = ""
    """wandb run name; empty: the run folder's name."""
    wandb: Literal["auto", "online", "offline", "disabled"] = "auto"
    """'auto': online when WANDB_API_KEY is set, offline otherwise."""
    wandb_entity: str = ""
    """wandb team or user; empty: the key's default."""
    tags: list[str] = field(default_factory=list)
    """wandb tags."""
    group: str = ""
    """wandb group: the runs of one pipeline (an SFT warm start, the GRPO run after it, their evaluation) side
    by side in the UI; empty: none (`swebox demo` sets one per demo)."""
    wandb_system: Literal["auto", "on", "off"] = "auto"
    """wandb's system metrics (GPU/CPU/memory sampling) and console capture: 'auto' turns both on for online
    runs and off for offline and disabled ones (an offline run on a shared CPU box would pay a sampler process
    for data nobody syncs); 'on'/'off' force them."""
    progress: bool = True
    """Show progress bars."""
    trajectories_every: int = 1
    """Write every rollout of every N-th step (prompt, turns, diff, grade, reward, advantage) to
    <run_dir>/trajectories/step_NNNNNN.jsonl.gz (docs/training.md); 0: never."""
    trajectories_keep_last: int = 0
    """Step files of trajectories kept on disk, newest first (older ones are deleted); 0: keep all."""
    wandb_rollouts_every: int = 10
    """Log a wandb Table `rollouts` (task, reward, resolved, turns, diff, last observation) every N steps; 0: never."""

    def __post_init__(self) -> None:
        _check(self.trajectories_every >= 0, "logging.trajectories_every", ">= 0", self.trajectories_every, "use 1")
        _check(
            self.trajectories_keep_last >= 0,
            "logging.trajectories_keep_last",
            ">= 0 (0 keeps all)",
            self.trajectories_keep_last,
            "use 0",
        )
        _check(
            self.wandb_rollouts_every >= 0, "logging.wandb_rollouts_every", ">= 0", self.wandb_rollouts_every, "use 10"
        )


@dataclass
class CheckpointConfig:
    dir: str = ""
    """Checkpoint folder; empty: <logging.run_dir>/checkpoints."""
    every_steps: int = 10
    """Save every this many steps; 0: only at the end."""
    keep_last: int = 2
    """Complete checkpoints kept; older ones are deleted."""
    resume: bool = False
    """Continue from the newest complete checkpoint (the command line's --resume)."""

    def __post_init__(self) -> None:
        _check(self.every_steps >= 0, "checkpoint.every_steps", ">= 0", self.every_steps, "use 10")
        _check(self.keep_last >= 1, "checkpoint.keep_last", ">= 1", self.keep_last, "use 2")


@dataclass
class SFTConfig:
    """``swebox sft``: supervised fine-tuning on trajectories (trainers/finetune/sft.py); the optimizer is
    ``optim``'s."""

    data: str = "gold"
    """'gold': expert episodes played from the tasks' gold patches in sandboxes (trainers/finetune/sft_data.py); or a
    JSON-lines file of episode records (``swebox eval --out``; ``.gz`` too), of which the resolved ones train
    (rejection sampling)."""
    epochs: int = 3
    """Passes over the kept trajectories."""
    batch_size: int = 4
    """Trajectories per optimizer step (accumulated in micro-batches of optim.micro_batch_size)."""
    lr: float = 0.0
    """Learning rate of fine-tuning; 0: optim.lr."""
    stop_at_sequence_prob: float = 0.0
    """Stop after the first epoch whose mean ``sft/sequence_prob`` (the chance that sampling at temperature 1
    reproduces a training trajectory's model tokens exactly) reaches this; 0: run all ``epochs``. A warm start
    for RL stops early on purpose: a policy that is *partly* right gives GRPO groups with both outcomes
    (configs/demo.yaml)."""
    minimal_patch: bool = False
    """``sft.data=gold``: the expert applies the gold patch without context lines (``git apply --unidiff-zero``),
    so its apply turn is about half as many tokens; a tiny policy learns that faster (configs/demo.yaml)."""

    def __post_init__(self) -> None:
        _check(bool(self.data), "sft.data", "'gold' or a records file", self.data, "use sft.data=gold")
        _check(self.epochs >= 1, "sft.epochs", ">= 1", self.epochs, "use 3")
        _check(self.batch_size >= 1, "sft.batch_size", ">= 1", self.batch_size, "use 4")
        _check(self.lr >= 0, "sft.lr", ">= 0", self.lr, "use 0 (optim.lr)")
        _check(
            0 <= self.stop_at_sequence_prob <= 1,
            "sft.stop_at_sequence_prob",
            "in [0, 1]",
            self.stop_at_sequence_prob,
            "use 0 (run every epoch)",
        )


@dataclass
class TrainConfig:
    seed: int = 0
    """Seed of python, numpy and torch RNGs and of the task order."""
    total_steps: int = 10
    """Training steps (one step = one rollout batch and its updates)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy."""
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    """Sampling from the policy."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """GRPO's maths."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """The optimizer and batching of updates."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """How episodes are collected."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The environment: the tasks, their layers and how each episode runs (an EpisodeConfig)."""
    ray: RayConfig = field(default_factory=RayConfig)
    """The Ray cluster."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Metrics and wandb."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoints and resuming."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Supervised fine-tuning (``swebox sft``); GRPO ignores it."""

    def __post_init__(self) -> None:
        _check(self.total_steps >= 1, "total_steps", ">= 1", self.total_steps, "use 10")
        _check(
            self.generation.backend != "openai",
            "generation.backend",
            "'transformers' or 'vllm' for training",
            "openai",
            "an OpenAI-compatible server cannot receive weight updates; use it with `swebox eval`",
        )
        # the weights are loaded into the engine's in-process model (generation.VLLMBackend), which with tensor
        # parallelism holds rank 0's shard only: the other ranks would keep sampling from the old policy
        _check(
            self.generation.backend != "vllm" or self.generation.vllm_tensor_parallel_size == 1,
            "generation.vllm_tensor_parallel_size",
            "1 for training with vllm (weights sync into one engine process)",
            self.generation.vllm_tensor_parallel_size,
            "use 1 and more actors or servers (a 7B model in bf16 fits one 80 GB GPU); > 1 suits `swebox eval`",
        )
        batch = self.rollout.tasks_per_step * self.rollout.group_size
        _check(
            batch % self.optim.mini_batches == 0,
            "optim.mini_batches",
            f"a divisor of the batch (tasks_per_step * group_size = {batch})",
            self.optim.mini_batches,
            "change optim.mini_batches or the rollout sizes",
        )
        _check(
            self.algorithm.overlong_buffer_len < self.generation.max_context_tokens,
            "algorithm.overlong_buffer_len",
            f"< generation.max_context_tokens ({self.generation.max_context_tokens})",
            self.algorithm.overlong_buffer_len,
            "lower it",
        )
        if self.model.init == "random":
            _check(
                self.model.max_position_embeddings >= self.generation.max_context_tokens,
                "model.max_position_embeddings",
                f">= generation.max_context_tokens ({self.generation.max_context_tokens})",
                self.model.max_position_embeddings,
                "raise it",
            )


# ------------------------------------------------------------------------------------------------ loading


def _renamed(new: str) -> str:
    return (
        f"was renamed: use {new} (the env section takes the names of "
        "swebox.envs.episodes.episode.EpisodeConfig; see docs/training.md)"
    )


OLD_KEYS = {
    "env.action_format": _renamed("env.style"),
    "env.max_observation_chars": _renamed("env.max_obs_chars"),
    "env.reward": _renamed("env.reward_mode (resolved -> binary, f2p_frac -> fraction)"),
    "env.memory_mb": _renamed("env.sandbox.memory_mb (in YAML: `sandbox: {memory_mb: 2048}`)"),
    "rollout.episode_timeout_s": _renamed("env.time_limit_s"),
    "ray.learner_num_gpus": "was removed: the learner runs in the trainer's own process, on its GPU when torch "
    "sees one (trainers/rl/trainer.py), so no setting chose its GPUs; delete the line",
}
"""Keys older configs may still hold -> what became of them (renamed to, or removed because) and what to do."""


def check_keys(data: Any, cls: type, prefix: str = "") -> None:
    """Reject keys of ``data`` (a nested dict) that are not fields of dataclass ``cls``, recursively."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{prefix.rstrip('.') or 'config'}: expected a mapping of keys; found {data!r}; write `key: value` lines"
        )
    names = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key, value in data.items():
        where = f"{prefix}{key}"
        if where in OLD_KEYS:
            raise ConfigError(f"config key {where!r} {OLD_KEYS[where]}")
        if key not in names:
            raise ConfigError(
                f"unknown config key {where!r}; valid keys{' of ' + prefix[:-1] if prefix else ''}: "
                f"{', '.join(sorted(names))}; fix the spelling (keys map 1:1 to trainers/run/config.py)"
            )
        if dataclasses.is_dataclass(hints[key]) and value is not None:
            check_keys(value, hints[key], f"{where}.")


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> nested dict, values parsed like YAML 1.2 (``null``, numbers, ``[1, 2]``; ``off`` is
    text, :mod:`.yaml12` says why)."""
    nested: dict[str, Any] = {}
    for item in overrides:
        _check(
            "=" in item and not item.startswith("="),
            "override",
            "KEY=VALUE with a dotted key",
            item,
            "write e.g. algorithm.clip_high=0.28",
        )
        key, _, text = item.partition("=")
        try:
            value = yaml12.load(text)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"override {item!r}: the value is not valid YAML ({problem}); fix the value") from None
        *parents, last = key.split(".")
        node = nested
        for i, part in enumerate(parents):
            node = node.setdefault(part, {})
            _check(
                isinstance(node, dict),
                "override",
                f"{'.'.join(parents[: i + 1])} to be a section",
                item,
                "set the section's fields, not the section",
            )
        node[last] = value
    return nested


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from a file; a missing file or bad YAML is a ConfigError naming the file and line."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"config file {path}: not found; expected a YAML file such as "
            "configs/grpo_tiny_cpu.yaml (paths are relative to the current folder)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot be read ({exc.strerror})") from None
    try:
        data = yaml12.load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML ({problem}); fix the file at that line") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path}: expected a mapping of config sections (e.g. `env:`); found a {type(data).__name__}"
        )
    return data


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Defaults <- YAML file (if any) <- dotted overrides, validated into a :class:`TrainConfig`."""
    layers = []
    if path is not None:
        data = read_yaml(path)
        check_keys(data, TrainConfig)
        layers.append(data)
    extra = parse_overrides(overrides)
    check_keys(extra, TrainConfig)
    layers.append(extra)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(TrainConfig), *layers)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "config"
        message = str(exc).splitlines()[0]
        raise ConfigError(f"{key}: {message}; fix the value (see its type in trainers/run/config.py)") from exc


def to_dict(config: TrainConfig) -> dict[str, Any]:
    """Plain nested dict of the config (for wandb and config.yaml)."""
    return dataclasses.asdict(config)


def save_config(config: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as YAML; ``load_config(path)`` reads it back to an equal config."""
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
