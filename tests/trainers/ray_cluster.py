"""Ray clusters of swebox nodes on loopback for the tests (ray.cluster_utils.Cluster: every node on 127.0.0.1).

Import it after ``pytest.importorskip("ray")``; it sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 before Ray is
imported, so no address but loopback is ever bound.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import ray
from ray.cluster_utils import Cluster
from swebox.envs.cache.ray_budget import node_resources

SWEBOX_NODE = {"swebox_node": 1.0, **node_resources(500)}
"""What scripts/ray_head.sh and ray_worker.sh advertise: the swebox marker and a 500 MB I/O budget."""


@contextlib.contextmanager
def swebox_cluster(
    head_cpus: float = 1, workers: Sequence[Mapping[str, Any]] = ({"num_cpus": 1},)
) -> Iterator[Cluster]:
    """A head and one node per entry of ``workers`` (``Cluster.add_node`` arguments, e.g. ``num_gpus``; its
    ``resources`` add to the swebox ones), all swebox nodes, with this process connected to it; Ray is shut down
    and every node stopped on exit."""
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": head_cpus, "resources": SWEBOX_NODE, "include_dashboard": False},
    )
    try:
        for node in workers:
            add_swebox_node(cluster, **node)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def add_swebox_node(cluster: Cluster, **args: Any) -> Any:
    """One more swebox node (``Cluster.add_node`` arguments; ``resources`` add to the swebox ones)."""
    return cluster.add_node(**{**args, "resources": {**SWEBOX_NODE, **args.get("resources", {})}})
