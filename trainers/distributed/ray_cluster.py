"""The cluster side of the Ray pool: joining or starting Ray with the resources swebox nodes carry, finding the
swebox nodes, and the Ray options of one rollout actor (its CPUs and GPUs, the node marker, the node it is pinned
to, the trainer's forwarded environment variables). ray_pool.py places its actors with these.
"""

from __future__ import annotations

import os
from typing import Any

from swebox.envs.cache.budget import DEFAULT_BUDGET_MB
from swebox.envs.cache.ray_budget import node_resources
from swebox.trainers.distributed.ray_connect import connect, is_loopback, use_loopback
from swebox.trainers.run.config import TrainConfig

FORWARDED_ENV = ("SWEBOX_LAYER_STORE", "SWEBOX_LAYER_CACHE")
"""Environment variables of the trainer's process that its rollout actors get too (where the layer store and the
node-local cache are; envs/episodes/layers_resolver.py), so that nodes started without them still find the layers."""
ACTOR_NODE_SHARE = 0.01
"""Amount of ``cfg.ray.node_resource`` one rollout actor takes: a marker that keeps actors on swebox nodes (each
advertises 1 of it), not a limit; up to 100 actors fit a node, and CPUs (``ray.actor_num_cpus``) bound them."""


def enable_token_auth_if_available() -> None:
    """Send this machine's Ray auth token (``RAY_AUTH_TOKEN``, ``~/.ray/auth_token``) when joining a cluster.

    Ray does so by itself only for ``address='auto'``; scripts/ray_head.sh starts clusters with token
    authentication, and clusters without it accept a token too. ``RAY_AUTH_MODE``, when set, decides instead.
    """
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def init_ray(cfg: TrainConfig, io_budget_mb: int = DEFAULT_BUDGET_MB) -> bool:
    """Connect to ``cfg.ray.address`` or start a local Ray whose node carries swebox's resources.

    Returns True when this call started or joined Ray (the caller then shuts it down), False when Ray was
    already initialised in this process (a test's cluster, the demo's own start).
    """
    import ray

    if ray.is_initialized():
        return False
    if cfg.ray.address:
        if is_loopback(cfg.ray.address):
            use_loopback()  # before the token setup imports Ray's internals (ray_connect's module docstring)
        enable_token_auth_if_available()
        connect(cfg.ray.address, cfg.ray.connect_timeout_s, namespace=cfg.ray.namespace, log_to_driver=False)
    else:
        resources = {cfg.ray.node_resource: 1.0, **node_resources(io_budget_mb)}
        # address="local": a new local Ray even when `ray start` left a cluster on this machine (ray.init()
        # would join that one, and refuse num_cpus and resources)
        ray.init(
            address="local",
            num_cpus=cfg.ray.num_cpus,
            resources=resources,
            namespace=cfg.ray.namespace,
            include_dashboard=False,
            log_to_driver=False,
        )
    return True


def swebox_nodes(node_resource: str, min_gpus: float = 0.0) -> list[str]:
    """Ids of the live nodes advertising ``node_resource`` (and at least ``min_gpus`` GPUs), in a stable order."""
    import ray

    return sorted(
        n["NodeID"]
        for n in ray.nodes()
        if n["Alive"] and n["Resources"].get(node_resource, 0) > 0 and n["Resources"].get("GPU", 0) >= min_gpus
    )


def actor_gpus(cfg: TrainConfig) -> float:
    """GPUs one rollout actor needs: a vLLM engine spans ``vllm_tensor_parallel_size`` GPUs; other backends, and
    any backend with placement 'server' (the servers own the GPUs: gen_server.server_gpus), none.

    Ray hides the GPUs from an actor that asks for none, so a vLLM actor must ask (the learner in the trainer's
    process shares them: ``generation.vllm_gpu_memory_utilization``).
    """
    gen = cfg.generation
    return float(gen.vllm_tensor_parallel_size) if gen.backend == "vllm" and gen.placement == "actor" else 0.0


def actor_options(cfg: TrainConfig, node_id: str | None) -> dict[str, Any]:
    """Ray ``.options`` of one rollout actor: its CPUs, the swebox node marker, pinned to ``node_id`` (None: any
    swebox node with room, Ray's choice), and the trainer's FORWARDED_ENV variables."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    options = {
        "num_cpus": cfg.ray.actor_num_cpus,
        "num_gpus": actor_gpus(cfg),
        "resources": {cfg.ray.node_resource: ACTOR_NODE_SHARE},
        "max_restarts": 0,  # trainers/distributed/ray_actors.py replaces dead actors itself, weights included
    }
    if node_id is not None:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    env = {name: os.environ[name] for name in FORWARDED_ENV if os.environ.get(name)}
    if env:
        options["runtime_env"] = {"env_vars": env}
    return options
