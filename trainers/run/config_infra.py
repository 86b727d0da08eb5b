"""The trainer configuration's run sections: the Ray cluster (``ray``), metrics and wandb (``logging``) and
checkpoints (``checkpoint``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .config_checks import check


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
        check(self.connect_timeout_s > 0, "ray.connect_timeout_s", "> 0 seconds", self.connect_timeout_s, "use 60")
        check(self.actors_per_node >= 1, "ray.actors_per_node", ">= 1", self.actors_per_node, "use 1")
        check(self.actor_num_cpus > 0, "ray.actor_num_cpus", "> 0", self.actor_num_cpus, "use 1")
        check(self.num_cpus is None or self.num_cpus >= 1, "ray.num_cpus", "null or >= 1", self.num_cpus, "use null")


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
        check(self.trajectories_every >= 0, "logging.trajectories_every", ">= 0", self.trajectories_every, "use 1")
        check(
            self.trajectories_keep_last >= 0,
            "logging.trajectories_keep_last",
            ">= 0 (0 keeps all)",
            self.trajectories_keep_last,
            "use 0",
        )
        check(
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
        check(self.every_steps >= 0, "checkpoint.every_steps", ">= 0", self.every_steps, "use 10")
        check(self.keep_last >= 1, "checkpoint.keep_last", ">= 1", self.keep_last, "use 2")
