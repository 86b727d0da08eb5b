"""Rollouts across the nodes of a Ray cluster: one or more rollout actors per node, tasks sent where their layers are.

``RayWorkerPool(cfg)`` is the trainer's :class:`~swebox.trainers.rl.rollout.WorkerPool` on Ray. It joins the cluster
named by ``cfg.ray.address`` (or starts a local one advertising the resources swebox nodes carry), places
``cfg.ray.actors_per_node`` rollout actors on every node that advertises ``cfg.ray.node_resource`` (hard node
affinity), and then, each step:

- broadcasts the policy's weights with one ``ray.put`` per version (every actor reads the same object; Ray moves
  it once per node),
- routes each task's group to an actor on a node whose layer cache already holds the task's environment (sticky
  by env key), spilling to the least loaded actor only when those actors are full for this step,
- gathers the trajectories back in the order of the tasks it was given.

Each actor owns a :class:`~swebox.trainers.rl.rollout.RolloutWorker` built on its node: its generation backend, its
sandboxes and the node's layer cache (``env.cache_dir`` may hold ``{node_id}``, for several nodes on one test
machine), whose unpacking is bounded by the node's I/O budget resource (``swebox.envs.cache.ray_budget``). With the
vLLM backend the actor's engine needs ``generation.vllm_tensor_parallel_size`` GPUs, which the actor asks Ray for,
so actors then go only to swebox nodes with GPUs. With ``generation.placement: server`` the backends live instead
in ``generation.num_servers`` generation servers on GPU nodes (trainers/policy/gen_server.py): rollout actors ask for no
GPUs, run on every swebox node, and generate through the servers, which get the weight syncs. Ray is imported only
here, in ray_cluster.py (joining Ray, the swebox nodes, an actor's options) and (lazily) in gen_server.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from swebox.envs.tasks.schema import Task
from swebox.trainers.distributed.ray_actors import (  # noqa: F401 - config_for_node and default_worker_factory: public here too
    ActorSet,
    RolloutActor,
    config_for_node,
    default_worker_factory,
    per_actor_parallelism,
)
from swebox.trainers.distributed.ray_cluster import actor_gpus, actor_options, init_ray, swebox_nodes
from swebox.trainers.distributed.ray_connect import absolute_paths
from swebox.trainers.policy import gen_server
from swebox.trainers.run.config import TrainConfig

MAX_GROUP_ATTEMPTS = 3
"""Times one call may hand a task's group to an actor that then dies, before the call fails naming the task: a
group that kills every actor it reaches (a crash in the worker itself) must not replace actors forever."""


class RayPoolError(RuntimeError):
    """The cluster cannot host the pool; the message says what was expected, what was found and how to fix it."""


# ------------------------------------------------------------------------------------------------ routing


def env_key_of(task: Task) -> str:
    """What a task's group is routed by: its env key (tasks sharing it share the env layer); its id without one."""
    return task.env_key or f"task:{task.instance_id}"


def route_groups(
    env_keys: Sequence[str], actor_nodes: Sequence[str], holders: Mapping[str, frozenset[str]]
) -> tuple[list[int], dict[str, frozenset[str]]]:
    """Assign each task (one group of episodes) to an actor; returns (actor index per task, updated holders).

    ``actor_nodes[i]`` is the node of actor ``i``; ``holders[key]`` the nodes whose layer cache holds env ``key``.
    Every actor takes at most ``ceil(len(env_keys) / len(actor_nodes))`` groups this step, so a step is balanced.
    Tasks are placed grouped by env key (the first occurrence's order): a task goes to the least loaded actor with
    room on a node that holds its key; if there is none, to the least loaded actor with room anywhere (lowest
    index on ties), whose node then holds the key too.
    """
    if not actor_nodes:
        raise RayPoolError("route_groups: expected at least one rollout actor; found none; add swebox nodes")
    cap = math.ceil(len(env_keys) / len(actor_nodes)) if env_keys else 0
    load = [0] * len(actor_nodes)
    held = {key: frozenset(nodes) for key, nodes in holders.items()}
    order = sorted(range(len(env_keys)), key=lambda i: (env_keys.index(env_keys[i]), i))
    choice = [-1] * len(env_keys)
    for i in order:
        key = env_keys[i]
        free = [a for a in range(len(actor_nodes)) if load[a] < cap]
        near = [a for a in free if actor_nodes[a] in held.get(key, frozenset())]
        actor = min(near or free, key=lambda a: (load[a], a))
        choice[i] = actor
        load[actor] += 1
        held[key] = held.get(key, frozenset()) | {actor_nodes[actor]}
    return choice, held


def cpu_state_dict(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Tensors detached and on the CPU (what crosses Ray's object store); other values as they are."""
    out = {}
    for name, value in state_dict.items():
        out[name] = value.detach().cpu() if hasattr(value, "detach") else value
    return out


# ------------------------------------------------------------------------------------------------ the pool


class RayWorkerPool:
    """The WorkerPool on a Ray cluster (see the module docstring). ``close()`` ends the actors, and Ray when the
    pool started it.

    ``worker_factory(cfg) -> worker`` builds each actor's worker (a :class:`swebox.trainers.rl.rollout.Worker`);
    it must be importable or picklable by Ray. The default builds a RolloutWorker.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        worker_factory: Callable[[TrainConfig], Any] | None = None,
        echo: Callable[[str], Any] = print,
    ) -> None:
        import ray

        # the actors run in their node's folder, not the trainer's: relative paths must not leave this process
        cfg = absolute_paths(cfg)
        self.cfg = cfg
        self.version: int | None = None
        self.weights_ref: Any = None
        self.owns_ray = init_ray(cfg)
        gpus = actor_gpus(cfg)
        nodes = swebox_nodes(cfg.ray.node_resource, gpus * cfg.ray.actors_per_node)
        if not nodes and swebox_nodes(cfg.ray.node_resource):
            self.close()
            raise RayPoolError(
                f"generation.backend=vllm: expected a swebox node with {gpus * cfg.ray.actors_per_node:g} GPU(s) "
                f"({cfg.ray.actors_per_node} actor(s) x vllm_tensor_parallel_size); found none with that many; "
                "start the GPU node with scripts/ray_head.sh --num-gpus N, or lower ray.actors_per_node"
            )
        if not nodes:
            found = sorted({k for n in ray.nodes() if n["Alive"] for k in n["Resources"]})
            self.close()
            raise RayPoolError(
                f"expected Ray nodes advertising the resource {cfg.ray.node_resource!r} (ray.node_resource); "
                f"found nodes with only {found}; start nodes with scripts/ray_head.sh and scripts/ray_worker.sh, "
                "or let the trainer start a local Ray (ray.address='')"
            )
        factory = worker_factory or default_worker_factory
        actors = len(nodes) * cfg.ray.actors_per_node
        remote = ray.remote(RolloutActor)
        self.servers: list[Any] = []
        """Generation servers (placement 'server'); the weight syncs go to them instead of the actors."""

        def start(node: str | None, slot: int) -> Any:
            server = self.servers[slot % len(self.servers)] if self.servers else None
            return remote.options(**actor_options(cfg, node)).remote(cfg, actors, factory, server)

        def load_weights(actor: Any) -> Any:  # a replacement actor gets the weights synced last
            if self.servers or self.weights_ref is None:
                return None
            return actor.set_weights.remote(self.weights_ref, self.version)

        live_nodes = lambda: swebox_nodes(cfg.ray.node_resource, gpus * cfg.ray.actors_per_node)  # noqa: E731
        self.actor_set = ActorSet(start, live_nodes, load_weights, echo)
        try:
            if cfg.generation.placement == "server":
                # a server thread per episode that may wait on it (all episodes may share one server)
                in_flight = per_actor_parallelism(cfg.rollout.max_parallel_episodes, actors) * actors
                self.servers = gen_server.start_pool_servers(cfg, in_flight)
            for node in nodes:
                for _ in range(cfg.ray.actors_per_node):
                    self.actor_set.add(node)
            placed = ray.get([a.node.remote() for a in self.actors])  # raises the worker's own error, if any
        except gen_server.ServerPlacementError as exc:
            self.close()
            raise RayPoolError(str(exc)) from exc
        except BaseException:
            self.close()  # no half-built pool holding the cluster's CPUs
            raise
        if placed != self.actor_nodes:  # hard affinity makes this impossible; a cheap guard all the same
            raise RayPoolError(f"actors landed on {placed}, expected {self.actor_nodes}; report this as a bug")
        self.holders: dict[str, frozenset[str]] = {}
        self.last_placement: list[str] = []
        """Node id of each task of the last ``run_groups`` call (in the order of its tasks)."""

    @property
    def actors(self) -> list[Any]:
        """The live rollout actors (handles), slot by slot."""
        return self.actor_set.handles

    @property
    def actor_nodes(self) -> list[str]:
        """The node of each actor in :attr:`actors`."""
        return self.actor_set.nodes

    @property
    def nodes(self) -> list[str]:
        """Distinct nodes with rollout actors."""
        return sorted(set(self.actor_nodes))

    def set_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Put the weights in the object store once for this version and load them into every actor, or, with
        placement 'server', into every generation server (the actors then hold no weights).

        Versions never mix within a step because the trainer calls this only between steps, when no rollout is
        in flight: ``Trainer.step`` returns from ``run_groups`` (every episode of the step, refills included)
        before its update and this sync. A server also loads weights only between engine calls, and
        ``run_groups`` checks that every generation of a call came from the version synced last.
        """
        import ray

        if version == self.version:
            return
        self.weights_ref, self.version = ray.put(cpu_state_dict(state_dict)), version
        if self.servers:
            ray.get([t.set_weights.remote(self.weights_ref, version) for t in self.servers])
        else:  # an actor that died (idle since the last step, or during this sync) is replaced with these weights
            self.actor_set.call_all("set_weights", self.weights_ref, version)
            self._require_actors()

    def step_metrics(self) -> dict[str, float]:
        """``pool/live_actors``, ``pool/actor_restarts`` and the servers' ``gen/server_*`` metrics since the last
        call (docs/metrics.md)."""
        out = {"pool/live_actors": float(len(self.actor_set)), "pool/actor_restarts": float(self.actor_set.restarts)}
        if self.servers:
            stats, _ = self.actor_set.gather({i: s.take_stats.remote() for i, s in enumerate(self.servers)})
            out.update(gen_server.merge_server_stats(list(stats.values())))
        return out

    def preflight(self, tasks: list[Task]) -> list[str]:
        """Every task checked on every node that runs rollouts (one actor per node: they share its store view)."""
        first = {}
        for slot, node in enumerate(self.actor_nodes):
            first.setdefault(node, slot)
        answers = self.actor_set.call_all_of(sorted(first.values()), "preflight", tasks)
        return [line for slot in sorted(answers) for line in answers[slot]]

    def _require_actors(self) -> None:
        if not self.actor_set:
            raise RayPoolError(
                "expected at least one live rollout actor; found none: every actor died and no live swebox node "
                f"has room for a replacement (nodes: {swebox_nodes(self.cfg.ray.node_resource)}); add swebox nodes "
                "(scripts/ray_worker.sh) and resume the run (--resume)"
            )

    def run_groups(self, tasks: list[Task], group_size: int) -> list[Any]:
        """``group_size`` trajectories per task, task after task in the given order, from actors across nodes: what
        the workers answer, as they answer it (a RolloutWorker's Trajectory objects, which Ray pickles).

        An actor that dies (killed, or its node lost) is replaced (see trainers/distributed/ray_actors.py) and its
        tasks are rerun; the call fails only when no actor is left or a task's group killed MAX_GROUP_ATTEMPTS actors.
        """
        keys = [env_key_of(t) for t in tasks]
        results: list[list[Any] | None] = [None] * len(tasks)
        placement: list[str] = [""] * len(tasks)
        attempts = [0] * len(tasks)
        todo = list(range(len(tasks)))
        while todo:
            self._require_actors()
            for i in todo:
                attempts[i] += 1
                if attempts[i] > MAX_GROUP_ATTEMPTS:
                    raise RayPoolError(
                        f"expected task {tasks[i].instance_id!r} to run on a rollout actor; found that "
                        f"its group killed {MAX_GROUP_ATTEMPTS} actors in a row; the worker itself crashes on this "
                        "task (see the actors' logs in /tmp/ray/session_latest/logs): remove the task or fix the crash"
                    )
            choice, self.holders = route_groups([keys[i] for i in todo], self.actor_nodes, self.holders)
            by_actor: dict[int, list[int]] = {}
            for i, actor in zip(todo, choice, strict=True):
                by_actor.setdefault(actor, []).append(i)
            calls = {a: self.actors[a].run.remote([tasks[i] for i in idx], group_size) for a, idx in by_actor.items()}
            answers, dead = self.actor_set.gather(calls)
            todo = sorted(i for a in dead for i in by_actor[a])
            for actor, answer in answers.items():
                self._check_versions(answer.get("generation_versions", []))
                for n, i in enumerate(by_actor[actor]):
                    results[i] = answer["trajectories"][n * group_size : (n + 1) * group_size]
                    placement[i] = answer["node_id"]
                    check_group(results[i], tasks[i], group_size)
            self.actor_set.replace(dead, "during a rollout")
        self.last_placement = placement
        return [d for group in results for d in group or []]

    def _check_versions(self, versions: list[int]) -> None:
        """Generations of a run all came from the version synced last (servers only report them)."""
        expected = self.version if self.version is not None else gen_server.INITIAL_VERSION
        if any(v != expected for v in versions):
            raise RayPoolError(
                f"expected every generation of this step from policy version {expected}; found versions "
                f"{versions}; the servers' weights changed while rollouts were in flight: call set_weights only "
                "between run_groups calls"
            )

    def close(self) -> None:
        """End the actors (closing their workers first) and Ray itself when this pool started it."""
        import ray

        if not ray.is_initialized():
            return
        if hasattr(self, "actor_set"):
            self.actor_set.close()  # a dead actor is skipped
        for server in getattr(self, "servers", []):
            ray.kill(server)
        self.servers = []
        if self.owns_ray:
            ray.shutdown()


def task_id_of(trajectory: Any) -> Any:
    """The task a worker's trajectory belongs to: its ``task_id`` (a key, for custom workers answering mappings)."""
    return trajectory.get("task_id") if isinstance(trajectory, Mapping) else getattr(trajectory, "task_id", None)


def check_group(group: list[Any], task: Task, group_size: int) -> None:
    """A worker answered ``group_size`` trajectories of the task asked for; anything else is a worker bug."""
    wanted = task.instance_id
    found = [task_id_of(t) for t in group]
    if len(group) != group_size or any(t != wanted for t in found):
        raise RayPoolError(
            f"expected {group_size} trajectories of task {wanted!r} from a rollout worker; found task ids {found}; "
            "RolloutWorker.run must return group_size trajectories per task, in the order of its tasks"
        )
