"""Rollouts: the policy plays episodes, token in and token out, and each becomes a :class:`Trajectory`.

One trajectory is the prompt (the chat template applied to the episode's first messages) followed by the
*response*: every token after the prompt, the model's and the environment's, in order. The model's tokens
are kept exactly as sampled (never decoded and encoded again), with their sampling logprobs; after each
model turn the observation is appended as the chat template's *delta* (what the template adds for one more
user message and the next assistant header), tokenised on its own. ``loss_mask`` is 1 only on model tokens.

``RolloutWorker`` owns a generation backend (and, for the transformers backend, its own copy of the policy)
and runs G episodes per task concurrently in threads; ``LocalWorkerPool`` is the trainer's in-process pool of
one such worker (``swebox.trainers.distributed.ray_pool.RayWorkerPool`` spreads workers over a Ray cluster).
"""

from __future__ import annotations

import copy
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from swebox.envs.episodes.turns import Episode, turn_record
from swebox.envs.tasks.schema import Task
from swebox.trainers.policy.generation import BatchingBackend, GenerationBackend, make_backend
from swebox.trainers.policy.sampling import sample_seed
from swebox.trainers.run.config import TrainConfig


@dataclass
class Trajectory:
    """One episode as the learner sees it. Crosses Ray as itself (pickled); trajectories.py writes it to files."""

    task_id: str
    """The task's instance_id."""
    group_id: str
    """Identifies the group (the G rollouts of one task in one step); advantages are normalised within it."""
    prompt_ids: list[int]
    """The first messages with the chat template applied, ending with the assistant header."""
    response_ids: list[int] = field(default_factory=list)
    """All tokens after the prompt: model turns as sampled, observation deltas between them."""
    loss_mask: list[int] = field(default_factory=list)
    """1 on model tokens, 0 on observation tokens; aligned with response_ids."""
    old_logprobs: list[float] = field(default_factory=list)
    """Sampling logprob of each model token, 0.0 where loss_mask is 0; aligned with response_ids."""
    reward: float = 0.0
    """The episode's reward (after the context-overflow rule)."""
    failed: bool = False
    """The environment (not the policy) failed: the trajectory is masked out of the loss."""
    truncated: bool = False
    """The episode filled generation.max_context_tokens (handled per rollout.on_context_overflow)."""
    num_turns: int = 0
    """Model turns played."""
    metrics: dict[str, float] = field(default_factory=dict)
    """env/* metrics of the episode and its timing/* (generate_s, env_s, grade_s, episode_s)."""
    intervals: list[tuple[str, float, float]] = field(default_factory=list)
    """(kind, start, end) wall-clock (time.time) spans of 'generate', 'env' and 'grade' work, so that a
    step's timing/* can be the union over concurrent episodes rather than their sum."""
    error: str = ""
    """Why the trajectory failed ('' when it did not)."""
    prompt: list[dict[str, str]] = field(default_factory=list)
    """The episode's first messages (system prompt, task prompt) as text."""
    turns: list[dict[str, Any]] = field(default_factory=list)
    """Per model turn, for people and fine-tuning (swebox.envs.episodes.turns.turn_record): turn, text, action,
    observation, exit_code, timed_out, format_error, generate_s, env_s, exec_s, tokens, finish_reason."""
    diff: str = ""
    """The final diff that was graded ('' when none)."""
    grade: dict[str, Any] | None = None
    """The grade report (GradeReport.to_dict()), None when the episode was not graded."""
    reason: str = ""
    """Why the episode ended: submitted, max_turns, time_limit, error (the env's), or '' when unknown."""
    audit: dict[str, Any] | None = None
    """The exploit audit's summary (info["audit"], swebox.envs.audit): flagged, rules, action, findings."""
    provenance: dict[str, Any] | None = None
    """What produced the reward (info["provenance"]): task and layer digests, grader, dataset row, policy."""
    cost: dict[str, Any] | None = None
    """What the rollout cost the host (info["cost"], swebox.envs.episodes.episode_cost): wall, CPU, memory, bytes."""

    def __post_init__(self) -> None:
        lengths = {len(self.response_ids), len(self.loss_mask), len(self.old_logprobs)}
        if len(lengths) != 1:
            raise ValueError(
                f"Trajectory {self.task_id}: expected response_ids, loss_mask and old_logprobs of one length; "
                f"found {len(self.response_ids)}, {len(self.loss_mask)}, {len(self.old_logprobs)}; "
                "append to all three together"
            )

    @property
    def num_model_tokens(self) -> int:
        return sum(self.loss_mask)


# ------------------------------------------------------------------------------------- chat-template deltas


def render(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def prompt_ids(tokenizer: Any, messages: list[dict[str, str]] | str) -> list[int]:
    """The episode's first messages (a string is one user message) as ids, ending with the assistant header."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    return encode(tokenizer, render(tokenizer, list(messages), add_generation_prompt=True))


_PROBE = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]


def observation_delta_ids(tokenizer: Any, observation: str, ended_turn: bool) -> list[int]:
    """The ids that follow a model turn to show ``observation`` and open the next assistant turn.

    The template is rendered for a probe conversation with and without one more user message; the
    difference, plus whatever the template writes after the end-of-turn token (ChatML: a newline), is the
    delta. ``ended_turn``: the model's tokens already end with the end-of-turn token; when they do not
    (it ran out of tokens), that token is put in first, as the template would.
    """
    before = render(tokenizer, _PROBE, add_generation_prompt=False)
    after = render(tokenizer, [*_PROBE, {"role": "user", "content": observation}], add_generation_prompt=True)
    eos = tokenizer.eos_token
    end = before.rfind(eos)
    if not after.startswith(before) or end < 0:
        raise ValueError(
            "chat template: expected each new message to extend the rendered conversation and an assistant turn "
            f"to end with {eos!r}; found otherwise; use a template with that property (ChatML does)"
        )
    ids = encode(tokenizer, before[end + len(eos) :] + after[len(before) :])
    return ids if ended_turn else [int(tokenizer.eos_token_id), *ids]


# ------------------------------------------------------------------------------------------ one episode


class _Clock:
    """Accumulates (kind, start, end) spans and per-kind totals for one episode."""

    def __init__(self) -> None:
        self.intervals: list[tuple[str, float, float]] = []

    def span(self, kind: str, start: float) -> None:
        self.intervals.append((kind, start, time.time()))

    def total(self, kind: str) -> float:
        return sum(end - start for k, start, end in self.intervals if k == kind)


def _env_call(clock: _Clock, fn: Callable[[], Any]) -> Any:
    start = time.time()
    try:
        return fn()
    finally:
        clock.span("env", start)


def play_episode(
    episode: Episode,
    backend: GenerationBackend,
    tokenizer: Any,
    cfg: TrainConfig,
    task_id: str = "",
    group_id: str = "",
    seed: int | None = None,
) -> Trajectory:
    """Play one episode with the policy behind ``backend``; never raises for an environment failure.

    ``seed``: the episode's sampling seed; turn ``t`` samples with ``sample_seed(seed, t)``, so the episode's
    tokens depend on it and on what the environment answered, not on other episodes (None: the backend's own
    randomness).

    The context (prompt + response) never exceeds ``generation.max_context_tokens``: a turn may generate only
    what is left, and an episode that runs out of room ends ``truncated`` and is handled per
    ``rollout.on_context_overflow`` ('truncate': submitted and graded as it stands; 'mask': ended unpaid,
    the trainer masks it; 'penalize': ended with ``rollout.overflow_reward``).
    """
    clock = _Clock()
    started = time.monotonic()
    traj = Trajectory(task_id=task_id, group_id=group_id, prompt_ids=[])
    max_context = cfg.generation.max_context_tokens
    info: dict[str, Any] = {}
    try:
        first = _env_call(clock, episode.reset)
        traj.prompt = [{"role": "user", "content": first}] if isinstance(first, str) else [dict(m) for m in first]
        traj.prompt_ids = prompt_ids(tokenizer, first)
        while True:
            room = max_context - len(traj.prompt_ids) - len(traj.response_ids)
            if room <= 0:
                traj.truncated = True
                break
            t0 = time.time()
            seeds = [sample_seed(seed, traj.num_turns)] if seed is not None else None
            out = backend.generate(
                [traj.prompt_ids + traj.response_ids], min(cfg.generation.max_new_tokens, room), seeds
            )[0]
            clock.span("generate", t0)
            traj.response_ids += out.token_ids
            traj.loss_mask += [1] * len(out.token_ids)
            traj.old_logprobs += list(out.logprobs)
            traj.num_turns += 1
            text = tokenizer.decode(out.token_ids, skip_special_tokens=True)
            t1 = time.time()
            result = _env_call(clock, lambda text=text: episode.step(text))
            info = dict(result.info or {})
            traj.turns.append(
                turn_record(
                    traj.num_turns,
                    text,
                    info,
                    result.observation,
                    t1 - t0,
                    time.time() - t1,
                    len(out.token_ids),
                    out.finish_reason,
                )
            )
            traj.reward = float(result.reward)
            if result.terminated or result.truncated:
                break
            if time.monotonic() - started > cfg.env.time_limit_s:  # an episode without a clock of its own
                raise TimeoutError(f"the episode ran past env.time_limit_s={cfg.env.time_limit_s:g}")
            delta = observation_delta_ids(tokenizer, result.observation, out.finish_reason == "stop")
            if len(traj.prompt_ids) + len(traj.response_ids) + len(delta) >= max_context:
                traj.truncated = True  # no room for the observation and a reply to it
                break
            traj.response_ids += delta
            traj.loss_mask += [0] * len(delta)
            traj.old_logprobs += [0.0] * len(delta)
        if traj.truncated:
            info = _end_overflowing(episode, traj, cfg, clock) or info
        if info.get("error"):
            traj.failed, traj.error = True, str(info["error"])
        traj.diff, traj.grade, traj.reason = str(info.get("diff") or ""), info.get("grade"), str(info.get("reason", ""))
        traj.audit, traj.provenance, traj.cost = info.get("audit"), info.get("provenance"), info.get("cost")
    except Exception as exc:  # an environment failure must not end the step: mask the trajectory instead
        traj.failed = True
        traj.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
        traj.reward = 0.0
    env_metrics = {k: float(v) for k, v in (info.get("metrics") or {}).items() if isinstance(v, (int, float))}
    if traj.failed:
        env_metrics["env/errors"] = max(1.0, env_metrics.get("env/errors", 0.0))
    _split_grade_time(clock, env_metrics.get("env/grade_s", 0.0))
    traj.metrics = {
        **env_metrics,
        "timing/generate_s": clock.total("generate"),
        "timing/env_s": clock.total("env"),
        "timing/grade_s": clock.total("grade"),
        "timing/episode_s": time.monotonic() - started,
    }
    traj.intervals = clock.intervals
    return traj


def _end_overflowing(episode: Episode, traj: Trajectory, cfg: TrainConfig, clock: _Clock) -> dict[str, Any]:
    mode = cfg.rollout.on_context_overflow
    traj.reward = cfg.rollout.overflow_reward if mode == "penalize" else 0.0
    submit = episode.submit_reply() if mode == "truncate" else None
    if submit is not None:
        result = _env_call(clock, lambda: episode.step(submit))
        traj.reward = float(result.reward)
        return dict(result.info or {})
    return {}


def _split_grade_time(clock: _Clock, grade_s: float) -> None:
    """Grading runs inside the episode's last step: move its share of that 'env' span to 'grade'."""
    if grade_s <= 0:
        return
    for i in range(len(clock.intervals) - 1, -1, -1):
        kind, start, end = clock.intervals[i]
        if kind == "env" and end - start >= grade_s * 0.999:
            clock.intervals[i : i + 1] = [("env", start, end - grade_s), ("grade", end - grade_s, end)]
            return


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
                model = PolicyModel(self.backend, self.tokenizer, gen.max_new_tokens, gen.max_context_tokens)
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
