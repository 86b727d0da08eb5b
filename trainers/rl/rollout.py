"""Rollouts: groups of episodes played by the policy, each becoming a :class:`Trajectory`.

One episode, token in and token out, is :func:`play_episode` (``swebox.trainers.rl.token_episode``, which holds
the trajectory's token layout; its names are importable from here too).

``RolloutWorker`` owns a generation backend (and, for the transformers backend, its own copy of the policy)
and runs G episodes per task concurrently in threads; ``LocalWorkerPool`` is the trainer's in-process pool of
one such worker (``swebox.trainers.distributed.ray_pool.RayWorkerPool`` spreads workers over a Ray cluster).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from swebox.envs.episodes.turns import Episode
from swebox.envs.tasks.schema import Task
from swebox.trainers.policy.generation import BatchingBackend, GenerationBackend, make_backend
from swebox.trainers.policy.sampling import sample_seed
from swebox.trainers.rl.token_episode import (
    Trajectory,
    encode,
    observation_delta_ids,
    play_episode,
    prompt_ids,
    render,
)
from swebox.trainers.run.config import TrainConfig

__all__ = [
    "EpisodeFactory",
    "LocalWorkerPool",
    "RolloutWorker",
    "SWEEpisodeFactory",
    "Trajectory",
    "Worker",
    "WorkerPool",
    "close_episodes",
    "encode",
    "observation_delta_ids",
    "play_episode",
    "prompt_ids",
    "render",
    "swe_episode_factory",
]


# ----------------------------------------------------------------------------------------- the workers


class EpisodeFactory(Protocol):
    """``factory(task, n) -> n episodes`` of that task, all starting from one prepared state. The worker owns
    what it returns: an :class:`swebox.envs.episodes.groups.EpisodeGroup` is closed as a whole (its episodes, then its
    layers), any other sequence episode by episode."""

    def __call__(self, task: Task, n: int) -> Sequence[Episode]: ...


class SWEEpisodeFactory:
    """SWE episodes of swebox.envs: G sandboxes forked from one prepared start (envs/episodes/groups.py); built by
    :func:`swe_episode_factory`. ``preflight`` says why a task's layers are not on this node."""

    def __init__(self, cfg: TrainConfig, source: Any | None = None, layers: list | None = None) -> None:
        from swebox.envs.episodes.grade_cache import GradeCache
        from swebox.envs.episodes.layers_resolver import LayerSource

        self.source = (
            source
            if source is not None
            else LayerSource(store=cfg.env.layer_store, cache_root=cfg.env.cache_dir, tasks_file=cfg.env.tasks)
        )
        self.layers = list(layers) if layers is not None else None
        self.config = cfg.env.episode()
        # one per worker (per process, per Ray actor): the verdicts of a run's diffs, shared by its episodes
        self.verdicts = GradeCache(cfg.env.grade_cache_size) if cfg.env.grade_cache else None

    def __call__(self, task: Task, n: int) -> Sequence[Episode]:
        from swebox.envs.episodes.groups import group

        if self.layers is not None:
            return group(task, n, layers=list(self.layers), config=self.config, grade_cache=self.verdicts)
        return group(task, n, source=self.source, config=self.config, grade_cache=self.verdicts)

    def preflight(self, task: Task) -> str | None:
        """Why ``task`` cannot start here (its layers missing from this node's store); None when it can, and
        always for fixed layer folders (nothing to look up)."""
        from swebox.envs.episodes.layers_resolver import missing_layers

        return None if self.layers is not None else missing_layers(task, self.source)


def swe_episode_factory(cfg: TrainConfig, source: Any | None = None, layers: list | None = None) -> SWEEpisodeFactory:
    """SWE episodes of swebox.envs: G sandboxes forked from one prepared start (envs/episodes/groups.py).

    Layers come from ``source`` (a LayerSource or its dict), by default the layer store ``env.layer_store``
    (else $SWEBOX_LAYER_STORE, else runs/layers) through the node-local cache in ``env.cache_dir``; or, for a
    single environment (fixtures), every task uses the layer folders ``layers``. The worker closes each group it
    gets (sandboxes, layer handles).
    """
    return SWEEpisodeFactory(cfg, source, layers)


def close_episodes(made: Sequence[Episode], quiet: bool = False) -> None:
    """Close what an episode factory made: an EpisodeGroup as a whole (its episodes, then its layers), any other
    sequence episode by episode. ``quiet``: best effort, errors ignored (a dead sandbox is already gone)."""
    from swebox.envs.episodes.groups import EpisodeGroup

    for closable in [made] if isinstance(made, EpisodeGroup) else list(made):
        try:
            closable.close()
        except Exception:
            if not quiet:
                raise


class RolloutWorker:
    """A generation backend plus the env side; runs groups of episodes. Built once per process/actor."""

    def __init__(
        self,
        cfg: TrainConfig,
        episode_factory: EpisodeFactory | None = None,
        model: Any | None = None,
        tokenizer: Any | None = None,
        backend: GenerationBackend | None = None,
    ) -> None:
        """``backend`` given (a generation server's client): no policy of its own is built or loaded."""
        from swebox.trainers.policy.models import build_model, build_tokenizer

        self.cfg = cfg
        self.tokenizer = tokenizer if tokenizer is not None else build_tokenizer(cfg.model)
        self.model = None
        if backend is None and cfg.generation.backend == "transformers":
            # the worker's own copy: the learner may update its weights while this one samples
            self.model = copy.deepcopy(model) if model is not None else build_model(cfg.model, self.tokenizer)
            self.model.eval()
            self.model.requires_grad_(False)
        self.backend = backend or make_backend(cfg.generation, self.model, self.tokenizer, model_path=cfg.model.path)
        self.episode_factory = episode_factory or swe_episode_factory(cfg)
        self.version = -1
        self._played: dict[str, int] = {}  # task id -> groups of it played with the current weights

    def set_weights(self, state_dict: Any, version: int) -> None:
        """Sample from these weights from now on; a version already loaded is skipped."""
        if version == self.version:
            return
        self.backend.update_weights(state_dict)
        self.version = version
        self._played.clear()

    def preflight(self, tasks: list[Task]) -> list[str]:
        """Why each task that cannot start here cannot (its layers missing from this node's store), one line per
        task; empty when all can, or when the episode factory has no such check (a custom factory)."""
        if not isinstance(self.episode_factory, SWEEpisodeFactory):
            return []
        return [str(why) for why in map(self.episode_factory.preflight, tasks) if why is not None]

    def run(self, tasks: list[Task], group_size: int) -> list[Trajectory]:
        """``group_size`` trajectories per task, in task order; failures become failed trajectories."""
        jobs: list[tuple[Task, str, Any, int]] = []
        made: list[Sequence[Episode]] = []
        results: list[Trajectory | None] = []
        for task in tasks:
            task_id = task.instance_id
            group_id = f"{task_id}#{uuid.uuid4().hex[:8]}"
            # the group's sampling seeds: the run's seed, the weights, the task and how often it was played with
            # them (dynamic sampling may draw a task twice in a step), then the sample's index
            occurrence = self._played.get(task_id, 0)
            self._played[task_id] = occurrence + 1
            try:
                group = self.episode_factory(task, group_size)
                made.append(group)
                episodes = list(group)
                if len(episodes) != group_size:
                    raise RuntimeError(f"the episode factory made {len(episodes)} episodes, not {group_size}")
            except Exception as exc:  # preparing the group failed: G failed trajectories keep the batch shape
                made_error = f"{type(exc).__name__}: {exc}"
                for _ in range(group_size):
                    results.append(
                        Trajectory(task_id, group_id, [], failed=True, error=made_error, metrics={"env/errors": 1.0})
                    )
                continue
            for index, episode in enumerate(episodes):
                jobs.append(
                    (task, group_id, episode, sample_seed(self.cfg.seed, self.version, task_id, occurrence, index))
                )
                results.append(None)
        slots = [i for i, r in enumerate(results) if r is None]
        parallel = self.cfg.rollout.max_parallel_episodes
        try:
            with ThreadPoolExecutor(max_workers=parallel) as pool:
                # in waves of whole groups: a group's episodes then ask for each turn together and share one
                # batch of the generation backend (episodes of a later group, started one by one as earlier ones
                # ended, went to the engine in fragments)
                wave = parallel // group_size * group_size or parallel
                for first in range(0, len(jobs), wave):
                    batch = jobs[first : first + wave]
                    if isinstance(self.backend, BatchingBackend):  # its batches wait for these episodes' turns
                        self.backend.join(len(batch))
                    futures = [
                        pool.submit(self._play, ep, task.instance_id, gid, seed) for task, gid, ep, seed in batch
                    ]
                    for slot, future in zip(slots[first : first + wave], futures, strict=True):
                        results[slot] = future.result()
        finally:
            for group in made:  # a group's close() closes its episodes and releases their layers
                close_episodes(group, quiet=True)
        return [t for t in results if t is not None]

    def _play(self, episode: Episode, task_id: str, group_id: str, seed: int) -> Trajectory:
        try:
            if self.cfg.env.harness:  # an agent program plays; the policy answers its calls through the gateway
                from swebox.trainers.rl.harness_rollout import PolicyModel, play_harness_episode

                gen = self.cfg.generation
                model = PolicyModel(
                    self.backend, self.tokenizer, gen.max_new_tokens, gen.max_context_tokens, gen.tool_call_parser
                )
                return play_harness_episode(
                    episode, model, self.tokenizer, self.cfg.env.harness_config(), task_id, group_id, seed
                )
            return play_episode(episode, self.backend, self.tokenizer, self.cfg, task_id, group_id, seed)
        finally:
            if isinstance(self.backend, BatchingBackend):
                self.backend.leave()

    def close(self) -> None:
        """Nothing to release beyond the episodes, which ``run`` closes."""


class Worker(Protocol):
    """What a rollout actor runs (:class:`RolloutWorker` is one): ``swebox.trainers.distributed.ray_pool``'s
    ``worker_factory`` builds one per actor and the actor calls only these."""

    def set_weights(self, state_dict: Any, version: int) -> None: ...

    def preflight(self, tasks: list[Task]) -> list[str]:
        """Why each task that cannot start here cannot, one line each; [] when all can."""
        ...

    def run(self, tasks: list[Task], group_size: int) -> list[Trajectory]: ...

    def close(self) -> None: ...


class WorkerPool(Protocol):
    """Where the trainer's rollouts run: in this process or on a Ray cluster."""

    def set_weights(self, state_dict: Any, version: int) -> None: ...

    def run_groups(self, tasks: list[Task], group_size: int) -> list[Trajectory]: ...

    def step_metrics(self) -> dict[str, float]:
        """Metrics of the pool itself for the step that just ran (e.g. generation servers' batching)."""
        ...

    def preflight(self, tasks: list[Task]) -> list[str]:
        """Why tasks cannot start on the pool's workers (one line each, naming the node); [] when all can."""
        ...

    def close(self) -> None: ...


class LocalWorkerPool:
    """One :class:`RolloutWorker` in this process."""

    def __init__(
        self,
        cfg: TrainConfig,
        episode_factory: EpisodeFactory | None = None,
        model: Any | None = None,
        tokenizer: Any | None = None,
    ) -> None:
        self.worker = RolloutWorker(cfg, episode_factory, model=model, tokenizer=tokenizer)

    def set_weights(self, state_dict: Any, version: int) -> None:
        self.worker.set_weights(state_dict, version)

    def preflight(self, tasks: list[Task]) -> list[str]:
        return self.worker.preflight(tasks)

    def run_groups(self, tasks: list[Task], group_size: int) -> list[Trajectory]:
        return self.worker.run(tasks, group_size)

    def step_metrics(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        self.worker.close()
