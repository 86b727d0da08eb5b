"""Shared generation servers: a few Ray actors own the policy, rollout actors on any node generate through them.

With ``generation.placement: server`` the pool (trainers/distributed/ray_pool.py) starts ``generation.num_servers``
:class:`GenerationServer` actors, each owning one backend (transformers or vLLM) and the GPUs it needs, on swebox
nodes chosen by :func:`place_servers`. Rollout actors then ask for no GPUs and run on every swebox node, CPU-only
ones included: their :class:`ServerClient` implements the ``GenerationBackend`` protocol by calling a server.

- **Batching.** A server is a threaded Ray actor (``max_concurrency`` covers every episode in flight), so calls
  from many rollout actors run at once in its threads and meet in the generation module's ``RequestBatcher``: whoever
  gets the engine takes every pending prompt (up to ``generation.batch_size``) into one engine call.
- **Versions.** The trainer's weight sync goes to the servers (one ``ray.put`` per version). Every answer says
  which version produced it (the version is read under the lock that also guards weight loads, so one engine
  call never spans two versions), and the pool checks that a step's rollouts saw exactly one version.
- **Stats.** Each server counts requests, batches and the time prompts waited for the engine; the pool turns
  them into the step's ``gen/server_*`` metrics (docs/metrics.md).

Ray is imported lazily, inside the functions that need it; ray_pool.py and ray_actors.py import this module.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from swebox.trainers.policy.generation import (
    Generated,
    GenerationBackend,
    RequestBatcher,
    TransformersBackend,
    make_backend,
)
from swebox.trainers.rl.rollout import EpisodeFactory, RolloutWorker
from swebox.trainers.run.config import TrainConfig

INITIAL_VERSION = -1
"""The version of a server's weights before the first sync (what it built itself: random or pretrained)."""
CONTROL_CALLS = 4
"""Threads of a server kept beyond one per episode in flight, for weight syncs and stats during generation."""


class ServerPlacementError(RuntimeError):
    """The swebox nodes cannot host the generation servers asked for; the message says how to fix it."""


# ------------------------------------------------------------------------------------------------ placement


def server_gpus(cfg: TrainConfig) -> float:
    """GPUs one generation server needs: a vLLM engine spans ``vllm_tensor_parallel_size`` GPUs; a transformers
    server takes ``generation.server_num_gpus`` (0: CPU)."""
    gen = cfg.generation
    return float(gen.vllm_tensor_parallel_size) if gen.backend == "vllm" else float(gen.server_num_gpus)


def gpu_setting(cfg: TrainConfig) -> str:
    """The config key that sets a server's GPUs, for error messages."""
    return "generation.vllm_tensor_parallel_size" if cfg.generation.backend == "vllm" else "generation.server_num_gpus"


def place_servers(nodes: Sequence[tuple[str, float]], per_server: float, count: int, setting: str = "") -> list[str]:
    """The node of each of ``count`` servers needing ``per_server`` GPUs each, round-robin over ``nodes``.

    ``nodes`` are (node id, GPUs the node advertises) in order of preference (the trainer's node first). A node
    hosts at most ``floor(GPUs / per_server)`` servers; GPU-less servers fit anywhere. Raises
    :class:`ServerPlacementError` when the nodes have room for fewer than ``count``.
    """
    room = {node: (math.floor(gpus / per_server + 1e-9) if per_server > 0 else count) for node, gpus in nodes}
    placed: list[str] = []
    while len(placed) < count:
        free = [node for node, _ in nodes if room[node] > 0]
        if not free:
            break
        for node in free[: count - len(placed)]:
            placed.append(node)
            room[node] -= 1
    if len(placed) < count:
        gpus = {node[:8]: g for node, g in nodes}
        fix = (
            f"start GPU nodes with scripts/ray_head.sh / scripts/ray_worker.sh --num-gpus N, lower "
            f"generation.num_servers, or lower {setting or 'the GPUs per server'}"
        )
        if not placed:
            raise ServerPlacementError(
                f"expected a swebox node with {per_server:g} GPU(s) for a generation server; found none "
                f"(GPUs per swebox node: {gpus}); {fix}"
            )
        raise ServerPlacementError(
            f"expected room for {count} generation server(s) of {per_server:g} GPU(s) each on the swebox nodes; "
            f"found room for {len(placed)} (GPUs per swebox node: {gpus}); {fix}"
        )
    return placed


def server_options(cfg: TrainConfig, node_id: str, concurrency: int) -> dict[str, Any]:
    """Ray ``.options`` of one generation server: its GPUs and CPUs, pinned to ``node_id``, threaded."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {
        "num_cpus": cfg.generation.server_num_cpus,
        "num_gpus": server_gpus(cfg),
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        "max_concurrency": concurrency,
        "max_restarts": 0,
    }


def swebox_node_gpus(node_resource: str, first: str = "") -> list[tuple[str, float]]:
    """(node id, GPUs) of the live swebox nodes, node ``first`` (the trainer's) first, then in a stable order."""
    import ray

    nodes = [
        (n["NodeID"], float(n["Resources"].get("GPU", 0)))
        for n in ray.nodes()
        if n["Alive"] and n["Resources"].get(node_resource, 0) > 0
    ]
    return sorted(nodes, key=lambda n: (n[0] != first, n[0]))


def start_pool_servers(cfg: TrainConfig, in_flight: int) -> list[Any]:
    """The pool's ``generation.num_servers`` servers, placed on swebox nodes with the trainer's node preferred (it
    holds the learner's GPUs), each with threads for ``in_flight`` concurrent generate calls."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    nodes = place_servers(
        swebox_node_gpus(cfg.ray.node_resource, here), server_gpus(cfg), cfg.generation.num_servers, gpu_setting(cfg)
    )
    return start_servers(cfg, nodes, in_flight + CONTROL_CALLS)


def start_servers(
    cfg: TrainConfig,
    nodes: Sequence[str],
    concurrency: int,
    backend_factory: Callable[[TrainConfig], GenerationBackend] | None = None,
) -> list[Any]:
    """One GenerationServer actor per entry of ``nodes``, each ready (its backend built) when this returns.

    A server that cannot build its backend raises here; the caller ends the others (``ray.kill``)."""
    import ray

    remote = ray.remote(GenerationServer)
    servers = [remote.options(**server_options(cfg, node, concurrency)).remote(cfg, backend_factory) for node in nodes]
    try:
        placed = ray.get([s.ready.remote() for s in servers])
    except BaseException:
        for server in servers:
            ray.kill(server)
        raise
    if list(placed) != list(nodes):  # hard affinity makes this impossible; a cheap guard all the same
        raise ServerPlacementError(f"servers landed on {placed}, expected {list(nodes)}; report this as a bug")
    return servers


# ------------------------------------------------------------------------------------------------ the server


def default_backend_factory(cfg: TrainConfig) -> GenerationBackend:
    """The backend a server owns, built as a RolloutWorker builds its own (on the GPU when it was given one)."""
    from swebox.trainers.policy.models import build_model, build_tokenizer

    tokenizer = build_tokenizer(cfg.model)
    model = None
    if cfg.generation.backend == "transformers":
        model = build_model(cfg.model, tokenizer)
        model.eval()
        model.requires_grad_(False)
        if cfg.generation.server_num_gpus > 0 and torch.cuda.is_available():
            model.to("cuda")
    return make_backend(cfg.generation, model, tokenizer, model_path=cfg.model.path)


@dataclass
class ServerStats:
    """What one server did since its stats were last taken (:meth:`GenerationServer.take_stats`)."""

    requests: int = 0
    """generate calls answered."""
    prompts: int = 0
    """Prompts in them."""
    batches: int = 0
    """Engine calls."""
    batch_max: int = 0
    """Most prompts in one engine call."""
    queue_s: float = 0.0
    """Sum over prompts of the time from arrival to the start of the engine call that answered it."""
    busy_s: float = 0.0
    """Sum of the engine calls' durations."""


class GenerationServer:
    """The body of one generation-server Ray actor: one backend, batched calls, versioned weights."""

    def __init__(
        self, cfg: TrainConfig, backend_factory: Callable[[TrainConfig], GenerationBackend] | None = None
    ) -> None:
        import ray

        self.node_id = ray.get_runtime_context().get_node_id()
        self.backend = (backend_factory or default_backend_factory)(cfg)
        self.version = INITIAL_VERSION
        self._batcher = RequestBatcher(self._run_batch, cfg.generation.batch_size, cfg.generation.batch_wait_s)
        # one engine call or one weight load at a time: a batch never sees two versions (vLLM's engine is not
        # thread-safe either; the transformers backend has a lock of its own, which this one nests outside)
        self._engine = threading.Lock()
        self._stats_lock = threading.Lock()
        self._stats = ServerStats()
        self._arrived: dict[int, float] = {}  # id(prompt) -> arrival time, while its request is pending
        self._version_of: dict[int, int] = {}  # id(prompt) -> version of the engine call that answered it

    def ready(self) -> str:
        return self.node_id

    def weights_version(self) -> int:
        """The version of the weights the next engine call uses."""
        return self.version

    def generate(
        self, prompts: list[list[int]], max_new_tokens: int, seeds: list[int] | None = None
    ) -> tuple[int, list[Generated]]:
        """(version of the weights that produced them, one continuation per prompt)."""
        arrived = time.monotonic()
        for p in prompts:  # the batcher hands these very objects to _run_batch, which finds them by id
            self._arrived[id(p)] = arrived
        try:
            out = self._batcher.submit(prompts, max_new_tokens, seeds)
            # RequestBatcher never splits a request, so one engine call (one version) answered all its prompts
            version = self._version_of[id(prompts[0])] if prompts else self.version
        finally:
            for p in prompts:
                self._arrived.pop(id(p), None)
                self._version_of.pop(id(p), None)
        with self._stats_lock:
            self._stats.requests += 1
        return version, out

    def _run_batch(self, prompts: list[list[int]], max_new_tokens: int, seeds: list[int] | None) -> list[Generated]:
        with self._engine:
            start = time.monotonic()
            for p in prompts:
                self._version_of[id(p)] = self.version
            out = self.backend.generate(prompts, max_new_tokens, seeds)
            busy = time.monotonic() - start
        with self._stats_lock:
            s = self._stats
            s.prompts += len(prompts)
            s.batches += 1
            s.batch_max = max(s.batch_max, len(prompts))
            s.queue_s += sum(start - self._arrived.get(id(p), start) for p in prompts)
            s.busy_s += busy
        return out

    def set_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Sample from these weights, as ``version``, from the next engine call on (waits for a running one)."""
        with self._engine:
            self.backend.update_weights(state_dict)
            self.version = version

    def update_weights(self, state_dict: Mapping[str, Any]) -> int:
        """:meth:`set_weights` as the next version of this server's own count; returns that version."""
        with self._engine:
            self.backend.update_weights(state_dict)
            self.version += 1
            return self.version

    def take_stats(self) -> dict[str, float]:
        """The stats since the last call (a dict of :class:`ServerStats` fields), and start counting anew."""
        with self._stats_lock:
            stats, self._stats = self._stats, ServerStats()
        return dict(vars(stats))

    def parameter(self, name: str) -> torch.Tensor:
        """A parameter of the served model on the CPU (transformers backend; for checks and tests)."""
        if not isinstance(self.backend, TransformersBackend):
            raise ValueError(
                f"GenerationServer.parameter: expected a transformers backend; found "
                f"{type(self.backend).__name__}; read weights of vLLM through its own API"
            )
        return self.backend.model.state_dict()[name].detach().cpu()


def merge_server_stats(stats: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The step's ``gen/server_*`` metrics from every server's :meth:`GenerationServer.take_stats`."""
    total = {
        key: sum(float(s.get(key, 0.0)) for s in stats)
        for key in ("requests", "prompts", "batches", "queue_s", "busy_s")
    }
    return {
        "gen/server_requests": total["requests"],
        "gen/server_batches": total["batches"],
        "gen/server_batch_mean": total["prompts"] / total["batches"] if total["batches"] else 0.0,
        "gen/server_batch_max": max((float(s.get("batch_max", 0)) for s in stats), default=0.0),
        "gen/server_queue_s": total["queue_s"] / total["prompts"] if total["prompts"] else 0.0,
        "gen/server_busy_s": total["busy_s"],
    }


# ------------------------------------------------------------------------------------------------ the client


class ServerClient:
    """A ``GenerationBackend`` that generates through a GenerationServer actor (handle ``server``).

    Thread-safe: a rollout worker's episodes call it from their threads at once, each call one Ray request,
    which the server batches with the other actors' requests. It records the versions that answered.
    """

    def __init__(self, server: Any) -> None:
        self.server = server
        self.calls = 0
        """generate calls made (each one server request)."""
        self._versions: set[int] = set()
        self._lock = threading.Lock()

    def generate(
        self, prompts: list[list[int]], max_new_tokens: int, seeds: list[int] | None = None
    ) -> list[Generated]:
        import ray

        version, out = ray.get(self.server.generate.remote(prompts, max_new_tokens, seeds))
        with self._lock:
            self.calls += 1
            self._versions.add(int(version))
        return out

    def update_weights(self, state_dict_or_model: Any) -> None:
        """Load these weights into the server (the pool syncs servers itself, once per version; this serves a
        client used on its own)."""
        import ray

        state = (
            state_dict_or_model.state_dict()
            if isinstance(state_dict_or_model, torch.nn.Module)
            else dict(state_dict_or_model)
        )
        ray.get(self.server.update_weights.remote({k: v.detach().cpu() for k, v in state.items()}))

    def take_versions(self) -> list[int]:
        """The weight versions that answered this client's calls since the last call, sorted; starts anew."""
        with self._lock:
            versions, self._versions = self._versions, set()
        return sorted(versions)


class ServedRolloutWorker(RolloutWorker):
    """A RolloutWorker whose generation goes to a server (``backend``, a :class:`ServerClient`): it loads no
    policy of its own, only the tokenizer, so it runs on nodes without GPUs."""

    def __init__(
        self,
        cfg: TrainConfig,
        backend: GenerationBackend,
        episode_factory: EpisodeFactory | None = None,
        tokenizer: Any | None = None,
    ) -> None:
        super().__init__(cfg, episode_factory, tokenizer=tokenizer, backend=backend)

    def set_weights(self, state_dict: Any, version: int) -> None:
        raise RuntimeError(
            "ServedRolloutWorker.set_weights: expected weights to go to the generation servers "
            "(RayWorkerPool.set_weights does so with generation.placement=server); found a call on a rollout "
            "worker; sync the servers instead"
        )
