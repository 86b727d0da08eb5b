"""The trainer's configuration: one typed dataclass per part, loaded from YAML with dotted overrides.

``configs/*.yaml`` files set the fields of :class:`TrainConfig` 1:1 (no keys of their own); command-line
overrides use dotted keys (``algorithm.clip_high=0.28``). Unknown keys are rejected with the list of
valid ones; values are type-checked by OmegaConf; invariants are checked in each ``__post_init__``. The
sections' dataclasses live in sibling modules (``config_policy``: model, generation; ``config_learning``:
algorithm, optim, sft; ``config_env``: rollout, env; ``config_infra``: ray, logging, checkpoint), their errors
in ``config_checks``; this module names them all, so ``from swebox.trainers.run.config import ...`` reaches each.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from . import yaml12
from .config_checks import ConfigError, check
from .config_env import CALIBRATION_ORDERS, EnvConfig, RolloutConfig
from .config_infra import CheckpointConfig, LoggingConfig, RayConfig
from .config_learning import AlgorithmConfig, KLEstimator, LossAggMode, OptimConfig, SFTConfig
from .config_policy import GenerationConfig, ModelConfig

__all__ = [  # the sections live in sibling modules (one concept each); their names are this module's too
    "CALIBRATION_ORDERS",
    "OLD_KEYS",
    "AlgorithmConfig",
    "CheckpointConfig",
    "ConfigError",
    "EnvConfig",
    "GenerationConfig",
    "KLEstimator",
    "LoggingConfig",
    "LossAggMode",
    "ModelConfig",
    "OptimConfig",
    "RayConfig",
    "RolloutConfig",
    "SFTConfig",
    "TrainConfig",
    "check_keys",
    "load_config",
    "parse_overrides",
    "read_yaml",
    "save_config",
    "to_dict",
]


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
        check(self.total_steps >= 1, "total_steps", ">= 1", self.total_steps, "use 10")
        check(
            self.generation.backend != "openai",
            "generation.backend",
            "'transformers' or 'vllm' for training",
            "openai",
            "an OpenAI-compatible server cannot receive weight updates; use it with `swebox eval`",
        )
        # the weights are loaded into the engine's in-process model (generation.VLLMBackend), which with tensor
        # parallelism holds rank 0's shard only: the other ranks would keep sampling from the old policy
        check(
            self.generation.backend != "vllm" or self.generation.vllm_tensor_parallel_size == 1,
            "generation.vllm_tensor_parallel_size",
            "1 for training with vllm (weights sync into one engine process)",
            self.generation.vllm_tensor_parallel_size,
            "use 1 and more actors or servers (a 7B model in bf16 fits one 80 GB GPU); > 1 suits `swebox eval`",
        )
        batch = self.rollout.tasks_per_step * self.rollout.group_size
        check(
            batch % self.optim.mini_batches == 0,
            "optim.mini_batches",
            f"a divisor of the batch (tasks_per_step * group_size = {batch})",
            self.optim.mini_batches,
            "change optim.mini_batches or the rollout sizes",
        )
        check(
            self.algorithm.overlong_buffer_len < self.generation.max_context_tokens,
            "algorithm.overlong_buffer_len",
            f"< generation.max_context_tokens ({self.generation.max_context_tokens})",
            self.algorithm.overlong_buffer_len,
            "lower it",
        )
        if self.model.init == "random":
            check(
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
                f"{', '.join(sorted(names))}; fix the spelling (keys map 1:1 to trainers/run/config*.py)"
            )
        if dataclasses.is_dataclass(hints[key]) and value is not None:
            check_keys(value, hints[key], f"{where}.")


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> nested dict, values parsed like YAML 1.2 (``null``, numbers, ``[1, 2]``; ``off`` is
    text, :mod:`.yaml12` says why)."""
    nested: dict[str, Any] = {}
    for item in overrides:
        check(
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
            check(
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
        raise ConfigError(f"{key}: {message}; fix the value (see its type in trainers/run/config*.py)") from exc


def to_dict(config: TrainConfig) -> dict[str, Any]:
    """Plain nested dict of the config (for wandb and config.yaml)."""
    return dataclasses.asdict(config)


def save_config(config: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as YAML; ``load_config(path)`` reads it back to an equal config."""
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
