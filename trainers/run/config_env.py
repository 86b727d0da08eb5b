"""The trainer configuration's episode sections: how episodes are collected (``rollout``) and the environment each
plays in (``env``: an EpisodeConfig plus the trainer's own keys)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from swebox.envs.episodes.episode import EpisodeConfig
from swebox.envs.gateway.calls import GatewayLimits
from swebox.envs.gateway.harness import HarnessConfig, episode_config
from swebox.envs.sandbox import SandboxError

from .config_checks import ConfigError, check, check_literals

# env.calibration_order's values (envs/tasks/calibrate_select.ORDERS; named here so that configs load without it).
CALIBRATION_ORDERS = ("none", "easy_first", "hard_first")


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
        check_literals(self, "rollout")
        check(self.tasks_per_step >= 1, "rollout.tasks_per_step", ">= 1", self.tasks_per_step, "use 4")
        check(
            self.group_size >= 2,
            "rollout.group_size",
            ">= 2 (advantages compare a group's rollouts)",
            self.group_size,
            "use 4 to 16",
        )
        check(
            self.max_parallel_episodes >= 1,
            "rollout.max_parallel_episodes",
            ">= 1",
            self.max_parallel_episodes,
            "use the number of CPU cores",
        )
        check(
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
        check(self.grade_cache_size >= 1, "env.grade_cache_size", ">= 1", self.grade_cache_size, "use 4096")
        check(
            self.calibration_order in CALIBRATION_ORDERS,
            "env.calibration_order",
            f"one of {', '.join(CALIBRATION_ORDERS)}",
            self.calibration_order,
            "pick one of them",
        )
        check(
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
