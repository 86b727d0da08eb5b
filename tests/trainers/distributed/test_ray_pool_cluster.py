"""RayWorkerPool on a real two-node Ray cluster on loopback (ray.cluster_utils.Cluster) with a scripted worker.

The worker stands in for RolloutWorker (tested on its own) so that these tests see the pool's own behaviour:
actors on both nodes, groups routed by env key and back in task order, one weight object per version, a dead
actor's groups rerun. test_ray_train_step.py runs a real training step over the same cluster shape.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray address on 127.0.0.1, before ray is imported

ray = pytest.importorskip("ray")
from swebox.envs.cache import EnvSpec  # noqa: E402
from swebox.trainers.distributed.ray_pool import RayPoolError, RayWorkerPool  # noqa: E402
from swebox.trainers.run.config import TrainConfig  # noqa: E402

from tests.trainers.ray_cluster import swebox_cluster  # noqa: E402
from tests.trainers.rl.test_rollout import stub_task  # noqa: E402

pytestmark = pytest.mark.timeout(300)


class ScriptedWorker:
    """Answers each task with group_size trajectory dicts saying where and with which weights they ran."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.node = ray.get_runtime_context().get_node_id()
        self.version = -1
        self.weight_sum = 0.0
        self.loads = 0

    def set_weights(self, state_dict, version: int) -> None:
        self.version = version
        self.weight_sum = float(sum(state_dict["w"]))
        self.loads += 1

    def preflight(self, tasks: list) -> list[str]:
        return []  # scripted: no layers to look for

    def close(self) -> None:
        pass

    def run(self, tasks: list, group_size: int) -> list[dict]:
        out = []
        for task in tasks:
            marker = task.metadata.get("die_once")
            if marker and not Path(marker).exists():
                Path(marker).write_text("died")
                os._exit(1)  # the node's actor is gone mid-step, as when a node leaves the cluster
            for g in range(group_size):
                out.append(
                    {
                        "task_id": task.instance_id,
                        "group_id": f"{task.instance_id}#{g}",
                        "node": self.node,
                        "version": self.version,
                        "weight_sum": self.weight_sum,
                        "loads": self.loads,
                        "cache_dir": self.cfg.env.cache_dir,
                        "parallel": self.cfg.rollout.max_parallel_episodes,
                        "store": os.environ.get("SWEBOX_LAYER_STORE", ""),
                    }
                )
        return out


def task(i: int, project: str, **extra):
    """A task of env ``project`` (tasks of one project share its env key); ``extra`` goes to its metadata."""
    spec = EnvSpec(source=f"pypi:{project}==1.0", python="3.11", test_deps=("pytest",))
    return stub_task(f"{project}.t{i}", env=spec, metadata=extra)


@pytest.fixture(scope="module")
def cluster():
    with swebox_cluster() as cluster:
        yield cluster


def config(**rollout) -> TrainConfig:
    cfg = TrainConfig()
    return dataclasses.replace(
        cfg,
        env=dataclasses.replace(cfg.env, cache_dir="/tmp/cache/{node_id}"),
        rollout=dataclasses.replace(cfg.rollout, max_parallel_episodes=4, **rollout),
    )


@pytest.fixture
def pool(cluster, monkeypatch):
    monkeypatch.setenv("SWEBOX_LAYER_STORE", "/shared/layers")  # the actors on both nodes get it
    pool = RayWorkerPool(config(), worker_factory=ScriptedWorker)
    try:
        yield pool
    finally:
        pool.close()


def test_actors_on_both_nodes_groups_in_task_order(pool):
    assert len(pool.nodes) == 2
    assert ray.is_initialized() and not pool.owns_ray  # joined the test's cluster, will not shut it down
    tasks = [task(0, "alpha"), task(1, "beta"), task(2, "alpha"), task(3, "beta")]
    out = pool.run_groups(tasks, group_size=3)
    assert [d["task_id"] for d in out] == [t.instance_id for t in tasks for _ in range(3)]
    assert set(pool.last_placement) == set(pool.nodes)  # episodes ran on both nodes
    for i, t in enumerate(tasks):  # what the pool says and where the worker says it ran agree
        assert {d["node"] for d in out if d["task_id"] == t.instance_id} == {pool.last_placement[i]}
    # the same env stays on one node; each actor runs half of the 4 episodes in flight; cache per node
    assert pool.last_placement[0] == pool.last_placement[2] != pool.last_placement[1] == pool.last_placement[3]
    assert {d["parallel"] for d in out} == {2}
    assert {d["cache_dir"] for d in out} == {f"/tmp/cache/{node}" for node in pool.nodes}
    assert {d["store"] for d in out} == {"/shared/layers"}

    # next step, another order: every env goes back to the node that holds it
    before = {t.env.source: n for t, n in zip(tasks, pool.last_placement, strict=True)}
    again = [task(5, "beta"), task(6, "alpha")]
    pool.run_groups(again, group_size=2)
    assert pool.last_placement == [before["pypi:beta==1.0"], before["pypi:alpha==1.0"]]


def test_weights_put_once_per_version_and_loaded_everywhere(pool):
    torch = pytest.importorskip("torch")
    pool.set_weights({"w": torch.tensor([1.0, 2.0])}, version=1)
    first = pool.weights_ref
    pool.set_weights({"w": torch.tensor([5.0, 5.0])}, version=1)  # same version: nothing moves
    assert pool.weights_ref is first
    out = pool.run_groups([task(0, "alpha"), task(1, "beta")], group_size=2)
    assert {(d["version"], d["weight_sum"], d["loads"]) for d in out} == {(1, 3.0, 1)}
    pool.set_weights({"w": torch.tensor([5.0, 5.0])}, version=2)
    assert pool.weights_ref is not first
    out = pool.run_groups([task(0, "alpha"), task(1, "beta")], group_size=2)
    assert {(d["version"], d["weight_sum"], d["loads"]) for d in out} == {(2, 10.0, 2)}


def test_dead_actor_is_replaced_and_its_groups_rerun(pool, tmp_path):
    tasks = [task(0, "alpha"), task(1, "beta", die_once=str(tmp_path / "died"))]
    out = pool.run_groups(tasks, group_size=2)
    assert (tmp_path / "died").exists()
    assert [d["task_id"] for d in out] == ["alpha.t0"] * 2 + ["beta.t1"] * 2
    # the dead actor was replaced on its node (still alive), where beta's group reran: the cache there holds it
    assert len(pool.actors) == 2 and len(pool.nodes) == 2
    assert pool.last_placement[0] != pool.last_placement[1]
    assert {d["node"] for d in out if d["task_id"] == "beta.t1"} == {pool.last_placement[1]}


def test_group_of_the_wrong_size_is_a_clear_error(cluster):
    class ShortWorker(ScriptedWorker):
        def run(self, tasks, group_size):
            return super().run(tasks, group_size)[:-1]

    pool = RayWorkerPool(config(), worker_factory=ShortWorker)
    try:
        with pytest.raises(RayPoolError, match="expected 2 trajectories of task"):
            pool.run_groups([task(0, "alpha")], group_size=2)
    finally:
        pool.close()


def test_cluster_without_swebox_nodes_is_refused(cluster):
    cfg = config()
    cfg = dataclasses.replace(cfg, ray=dataclasses.replace(cfg.ray, node_resource="not_a_swebox_node"))
    with pytest.raises(RayPoolError, match=r"advertising the resource 'not_a_swebox_node'.*ray_head\.sh"):
        RayWorkerPool(cfg, worker_factory=ScriptedWorker)
    assert ray.is_initialized()  # the test's cluster is left alone


class BrokenWorker:
    def __init__(self, cfg: TrainConfig) -> None:
        raise RuntimeError("no model folder at /nowhere")


def test_worker_that_cannot_start_fails_the_pool_and_frees_the_cluster(cluster):
    with pytest.raises(Exception, match="no model folder at /nowhere"):
        RayWorkerPool(config(), worker_factory=BrokenWorker)
    # the failed actors gave their CPUs back: a working pool fits on both nodes again
    pool = RayWorkerPool(config(), worker_factory=ScriptedWorker)
    try:
        assert len(pool.nodes) == 2
    finally:
        pool.close()
