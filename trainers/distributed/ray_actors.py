"""The rollout actors of a Ray pool: the body of one (:class:`RolloutActor`), and the set of them, which heals:
a dead actor is replaced, not dropped.

An actor dies when its process is killed (OOM killer, an operator's ``kill -9``, a crash in native code) or when
its node leaves the cluster. :class:`ActorSet` notices on whatever call reaches the dead actor first (a rollout,
a weight sync, a close) and starts a replacement in the same slot: on the dead actor's node when that node is
still alive and has room, else wherever Ray finds a swebox node with room; the replacement gets the weights
synced last before it takes work. A slot for which no node has room is dropped; the pool fails only when no
actor is left.

Ray's own restarts (``max_restarts``) would not do: a restarted actor has lost the weights synced to it, and a
restart pinned (hard affinity) to a node that left never schedules. The set counts its replacements
(``pool/actor_restarts``) and says each one in a log line. Ray is imported lazily, as in ray_pool.py.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from swebox.envs.tasks.schema import Task
from swebox.trainers.policy import gen_server
from swebox.trainers.rl.rollout import Worker
from swebox.trainers.run.config import TrainConfig

START_TIMEOUT_S = 60.0
"""How long a replacement may take to start (build its worker) before its node is deemed to have no room."""


def per_actor_parallelism(total: int, actors: int) -> int:
    """Episodes one actor runs at once so that all actors together run about ``total`` (at least 1 each)."""
    return max(1, math.ceil(total / max(1, actors)))


# ------------------------------------------------------------------------------------------------ one actor


def default_worker_factory(cfg: TrainConfig, backend: Any | None = None) -> Worker:
    """The real worker: a RolloutWorker (generation backend + env side) built inside the actor; with placement
    'server' (``backend``: the actor's ServerClient) one that generates through the server."""
    from swebox.trainers.rl.rollout import RolloutWorker

    return RolloutWorker(cfg) if backend is None else gen_server.ServedRolloutWorker(cfg, backend)


def config_for_node(cfg: TrainConfig, node_id: str, actors: int) -> TrainConfig:
    """The config one actor runs with: its node's cache folder and its share of the episodes in flight."""
    env = dataclasses.replace(cfg.env, cache_dir=cfg.env.cache_dir.replace("{node_id}", node_id))
    rollout = dataclasses.replace(
        cfg.rollout, max_parallel_episodes=per_actor_parallelism(cfg.rollout.max_parallel_episodes, actors)
    )
    return dataclasses.replace(cfg, env=env, rollout=rollout)


class RolloutActor:
    """The body of one Ray rollout actor: a worker built on this node, answering with its node id.

    Given a generation ``server`` (placement 'server'), the worker factory is called as ``factory(cfg, client)``
    with a ServerClient of that server, and each run reports the weight versions that answered its episodes.
    """

    def __init__(
        self, cfg: TrainConfig, actors: int, worker_factory: Callable[..., Any], server: Any | None = None
    ) -> None:
        import ray

        self.node_id = ray.get_runtime_context().get_node_id()
        node_cfg = config_for_node(cfg, self.node_id, actors)
        self.client = gen_server.ServerClient(server) if server is not None else None
        self.worker: Worker = worker_factory(node_cfg) if self.client is None else worker_factory(node_cfg, self.client)

    def node(self) -> str:
        return self.node_id

    def set_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        self.worker.set_weights(state_dict, version)

    def preflight(self, tasks: list[Task]) -> list[str]:
        return [f"on node {self.node_id[:8]}: {why}" for why in self.worker.preflight(tasks)]

    def run(self, tasks: list[Task], group_size: int) -> dict[str, Any]:
        """The worker's trajectories of ``tasks`` (Task objects and Trajectory objects both cross Ray pickled)."""
        started = time.monotonic()
        trajectories = self.worker.run(tasks, group_size)
        versions = self.client.take_versions() if self.client is not None else []
        return {
            "node_id": self.node_id,
            "trajectories": trajectories,
            "seconds": time.monotonic() - started,
            "generation_versions": versions,
        }

    def close(self) -> None:
        self.worker.close()


# ------------------------------------------------------------------------------------------------ the set


def short(node_id: str) -> str:
    return node_id[:8]


class ActorSet:
    """Rollout actors by slot: ``handles[i]`` runs on ``nodes[i]``.

    ``start(node_id | None, slot) -> handle`` creates one actor (its options, its share of a generation server),
    pinned to the node or, for None, on any swebox node with room; ``live_nodes() -> [node_id]`` lists the live
    swebox nodes; ``load_weights``
    ``(handle) -> ObjectRef | None`` is the call that gives a new actor the current weights (None: nothing to
    load yet, or the weights live in generation servers).
    """

    def __init__(
        self,
        start: Callable[[str, int], Any],
        live_nodes: Callable[[], list[str]],
        load_weights: Callable[[Any], Any],
        echo: Callable[[str], Any] = print,
    ) -> None:
        self.start, self.live_nodes, self.load_weights, self.echo = start, live_nodes, load_weights, echo
        self.handles: list[Any] = []
        self.nodes: list[str] = []
        self.restarts = 0
        """Actors replaced since the pool started (``pool/actor_restarts``)."""

    def __len__(self) -> int:
        return len(self.handles)

    def add(self, node_id: str) -> None:
        self.handles.append(self.start(node_id, len(self.handles)))
        self.nodes.append(node_id)

    def gather(self, refs: dict[int, Any], timeout: float | None = None) -> tuple[dict[int, Any], list[int]]:
        """``ray.get`` of each slot's ref: (answers by slot, slots whose actor died). Other errors propagate."""
        import ray
        from ray.exceptions import RayActorError

        answers, dead = {}, []
        for slot, ref in refs.items():
            try:
                answers[slot] = ray.get(ref, timeout=timeout)
            except RayActorError:
                dead.append(slot)
        return answers, dead

    def call_all(self, method: str, *args: Any) -> dict[int, Any]:
        """``method(*args)`` on every actor; dead actors are replaced (their answer is missing from the result)."""
        return self.call_all_of(range(len(self.handles)), method, *args)

    def call_all_of(self, slots: Sequence[int], method: str, *args: Any) -> dict[int, Any]:
        """:meth:`call_all` on the actors of ``slots`` only."""
        refs = {i: getattr(self.handles[i], method).remote(*args) for i in slots}
        answers, dead = self.gather(refs)
        self.replace(dead, f"during {method}")
        return answers

    def replace(self, dead: Sequence[int], when: str) -> None:
        """Start a replacement for each dead slot (same node first); drop the slots no live node can host."""
        import ray

        if not dead:
            return
        for slot in sorted(dead):
            old_node = self.nodes[slot]
            ray.kill(self.handles[slot], no_restart=True)  # a hung, half-dead actor must release its CPUs
            # its own node first (that node's cache already holds its envs), then any node with room
            candidates = ([old_node] if old_node in self.live_nodes() else []) + [None]
            handle, where = self._start_on(candidates, slot)
            if handle is None:
                self.handles[slot] = None
                self.echo(
                    f"ray pool: rollout actor {slot} on node {short(old_node)} died {when}; no live swebox "
                    "node has room for a replacement; the pool continues without it"
                )
                continue
            self.handles[slot], self.nodes[slot] = handle, where
            self.restarts += 1
            self.echo(
                f"ray pool: rollout actor {slot} on node {short(old_node)} died {when}; replaced on node "
                f"{short(where)} ({self.restarts} replacement(s) so far)"
            )
        keep = [i for i, h in enumerate(self.handles) if h is not None]
        self.handles = [self.handles[i] for i in keep]
        self.nodes = [self.nodes[i] for i in keep]

    def _start_on(self, candidates: Sequence[str | None], slot: int) -> tuple[Any, str]:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        for node in candidates:
            handle = self.start(node, slot)
            try:
                where = ray.get(handle.node.remote(), timeout=START_TIMEOUT_S)
                load = self.load_weights(handle)
                if load is not None:
                    ray.get(load, timeout=START_TIMEOUT_S)
                return handle, where
            except (RayActorError, GetTimeoutError):  # the node left, or has no room: try the next one
                ray.kill(handle, no_restart=True)
        return None, ""

    def close(self, timeout: float | None = 60.0) -> None:
        """Close every live actor's worker (a dead one is skipped; None: no deadline) and end the actors."""
        import ray

        refs = {i: h.close.remote() for i, h in enumerate(self.handles)}
        try:
            self.gather(refs, timeout=timeout)
        except Exception:  # a slow or failing close must not keep the cluster's resources held
            pass
        for handle in self.handles:
            ray.kill(handle)
        self.handles, self.nodes = [], []
