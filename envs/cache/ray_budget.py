"""The I/O budget across Ray workers: a per-node custom resource plus node-affinity scheduling.

Within one process ``IOBudget`` bounds the archive MB in flight; several Ray workers on one node each have
their own, so the node-wide bound is a custom resource: every node starts with ``swebox_io_mb`` equal to
its budget (``ray start --resources='{"swebox_io_mb": 2000}'``), and every unpack runs as a Ray task that
asks for its archive's MB of it, pinned (hard node affinity) to the node that will use the layer. Ray
then never runs more than the budget on a node, and never unpacks a layer on a node that does not need it.

Ray is imported lazily: the environments run without it.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from .budget import DEFAULT_BUDGET_MB, weight_mb
from .layer_cache import LayerCache, LayerCacheConfig
from .store import LayerStore

RESOURCE = "swebox_io_mb"
"""Name of the per-node custom Ray resource (MB of archive that may be in flight on that node)."""


def node_resources(budget_mb: int = DEFAULT_BUDGET_MB) -> dict[str, float]:
    """Resources to give a node at start (``ray.init(resources=...)``, ``Cluster.add_node(resources=...)``)."""
    return {RESOURCE: float(budget_mb)}


def node_budget_mb(node_id: str) -> int:
    """The budget a live Ray node was started with; a clear error when it has none."""
    import ray

    for node in ray.nodes():
        if node["NodeID"] == node_id and node["Alive"]:
            budget = node["Resources"].get(RESOURCE)
            if not budget:
                raise RuntimeError(
                    f"Ray node {node_id} has no {RESOURCE!r} resource; start it with "
                    f"`ray start --resources='{{\"{RESOURCE}\": {DEFAULT_BUDGET_MB}}}'` (the I/O budget in MB)."
                )
            return int(budget)
    raise RuntimeError(f"Ray node {node_id} is not alive in this cluster.")


def io_task_options(node_id: str, nbytes: int, budget_mb: int) -> dict[str, Any]:
    """``.options(...)`` for a task that moves ``nbytes`` of archive on ``node_id``: its weight of the
    node's budget, no CPU (it waits on the disk), and hard affinity to that node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {
        "num_cpus": 0,
        "resources": {RESOURCE: float(weight_mb(nbytes, budget_mb))},
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    }


def cache_config_for(config: LayerCacheConfig, node_id: str) -> LayerCacheConfig:
    """The config with ``{node_id}`` in its root filled in (several Ray nodes on one test machine)."""
    return LayerCacheConfig(**{**asdict(config), "root": config.root.replace("{node_id}", node_id)})


def _materialise(store_root: str, store_fmt: str, config: dict[str, Any], key: str) -> dict[str, Any]:
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    start = time.time()
    cache = LayerCache(LayerStore(store_root, fmt=store_fmt), cache_config_for(LayerCacheConfig(**config), node_id))
    with cache.acquire(key) as handle:
        path = str(handle.path)
    return {"node_id": node_id, "key": key, "path": path, "start": start, "end": time.time()}


def materialise_on_node(store: LayerStore, keys: list[str], node_id: str, config: LayerCacheConfig) -> list[Any]:
    """Submit one budgeted, node-pinned materialisation task per key; returns their ObjectRefs."""
    import ray

    budget = node_budget_mb(node_id)
    remote = ray.remote(_materialise)
    refs = []
    for key in keys:
        options = io_task_options(node_id, store.require(key).size, budget)
        refs.append(remote.options(**options).remote(str(store.root), store.fmt, asdict(config), key))
    return refs


def acquire_on_this_node(cache: LayerCache, key: str) -> Any:
    """From inside a Ray worker: materialise under the node's Ray budget, then hold the layer locally.
    Outside Ray (or on a node without the resource) this is ``cache.acquire(key)``."""
    try:
        import ray
    except ImportError:
        return cache.acquire(key)
    if not ray.is_initialized():
        return cache.acquire(key)
    node_id = ray.get_runtime_context().get_node_id()
    try:
        node_budget_mb(node_id)
    except RuntimeError:
        return cache.acquire(key)
    ray.get(materialise_on_node(cache.store, [key], node_id, cache.config))
    return cache.acquire(key)  # already materialised: takes the user lock only
