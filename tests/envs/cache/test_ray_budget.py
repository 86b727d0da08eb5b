"""Two Ray nodes on loopback: each materialises its own layers, in its own cache, under its own budget."""

from __future__ import annotations

import os
import time

import pytest
from swebox.envs.cache.layer_cache import LayerCache, LayerCacheConfig, node_key
from swebox.envs.cache.ray_budget import RESOURCE, io_task_options, materialise_on_node, node_resources
from swebox.envs.cache.store import LayerStore

from .conftest import make_layer_tree

BUDGET_MB = 25
LAYER_MB = 10  # each archive weighs 11 MB (rounded up): two fit in a node's budget, three do not


@pytest.fixture(scope="module")
def cluster():
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": node_resources(BUDGET_MB), "object_store_memory": 80 * 1024 * 1024},
    )
    c.add_node(num_cpus=1, resources=node_resources(BUDGET_MB), object_store_memory=80 * 1024 * 1024)
    ray.init(address=c.address)
    c.wait_for_nodes()
    yield ray, [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    ray.shutdown()
    c.shutdown()


def _store(tmp_path, n: int) -> LayerStore:
    store = LayerStore(tmp_path / "store", fmt="tar.zst")
    for i in range(n):
        tree = make_layer_tree(tmp_path / "trees" / f"l{i}", payload=os.urandom(LAYER_MB * 1_000_000))
        with store.lock(f"env-{i}"):
            store.publish(f"env-{i}", tree)
    return store


def _peak(intervals: list[tuple[float, float, int]]) -> int:
    """Most weight running at once, from (start, end, weight) intervals."""
    events = sorted(
        [(s, w) for s, _, w in intervals] + [(e, -w) for _, e, w in intervals], key=lambda ev: (ev[0], ev[1])
    )  # at equal times, ends (negative) before starts
    peak = level = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


@pytest.mark.e2e
def test_each_node_materialises_its_own_layers_under_its_budget(cluster, tmp_path):
    ray, nodes = cluster
    assert len(nodes) == 2
    store = _store(tmp_path, 5)
    config = LayerCacheConfig(root=str(tmp_path / "node-{node_id}"))

    # a local function: Ray ships it to its workers by value (they cannot import this test module)
    def _hold_until_paired(folder, key: str, of: int, timeout_s: float = 60.0) -> None:
        """Hold the budget until a second task of this node holds it too, or none is left to come (all ``of``
        tasks of the node held or done): two at once whatever the pace at which a loaded machine starts Ray's
        workers, where a fixed hold (a sleep) could end before the second worker started. A budget that let one
        task at a time in ends each hold at the deadline, with a peak of one."""
        holding, done = folder / "in", folder / "done"
        holding.mkdir(parents=True, exist_ok=True)
        done.mkdir(parents=True, exist_ok=True)
        (holding / key).touch()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            held = len(os.listdir(holding))
            if held >= 2 or held + len(os.listdir(done)) >= of:
                break
            time.sleep(0.02)
        (done / key).touch()
        (holding / key).unlink()

    rendezvous = tmp_path / "holding"

    @ray.remote
    def slow_materialise(key: str) -> dict:
        node = ray.get_runtime_context().get_node_id()
        cache = LayerCache(store, LayerCacheConfig(root=config.root.replace("{node_id}", node)))
        start = time.time()
        with cache.acquire(key):
            _hold_until_paired(rendezvous / node, key, of=5)
        return {"node": node, "key": key, "start": start, "end": time.time()}

    refs = []
    for node in nodes:
        for key in [f"env-{i}" for i in range(5)]:
            opts = io_task_options(node, store.require(key).size, BUDGET_MB)
            assert opts["resources"] == {RESOURCE: 11.0}
            refs.append(slow_materialise.options(**opts).remote(key))
    results = ray.get(refs, timeout=120)
    for i, node in enumerate(nodes):
        mine = results[i * 5 : (i + 1) * 5]
        assert {r["node"] for r in mine} == {node}  # node affinity: never elsewhere
        peak = _peak([(r["start"], r["end"], 11) for r in mine])
        assert peak == 22  # two at a time, never the third (33 MB > 25 MB)
        cache_root = tmp_path / f"node-{node}"
        assert sorted(os.listdir(cache_root / "layers")) == sorted(node_key(store.get(f"env-{k}")) for k in range(5))

    # the library's own entry point pins and budgets the same way
    refs = materialise_on_node(store, ["env-0", "env-1"], nodes[1], config)
    done = ray.get(refs, timeout=60)
    assert {r["node_id"] for r in done} == {nodes[1]}
    assert all(r["path"].startswith(str(tmp_path / f"node-{nodes[1]}")) for r in done)


@pytest.mark.e2e
def test_unknown_node_is_a_clear_error_and_known_ones_work(cluster, tmp_path):
    ray, nodes = cluster
    store = _store(tmp_path, 1)
    from swebox.envs.cache import ray_budget

    with pytest.raises(RuntimeError, match="is not alive"):
        ray_budget.node_budget_mb("ff" * 28)
    refs = materialise_on_node(store, ["env-0"], nodes[0], LayerCacheConfig(root=str(tmp_path / "n")))
    assert ray.get(refs, timeout=60)[0]["key"] == "env-0"
