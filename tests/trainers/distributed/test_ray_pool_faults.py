"""RayWorkerPool when rollout actors die: killed (SIGKILL) in a rollout, in a weight sync, while idle, and with
their node leaving the cluster, on a real loopback Ray cluster. The pool replaces every dead actor (weights
included), reruns the lost groups, says so in a log line and in pool/* metrics, and keeps its full size."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray address on 127.0.0.1, before ray is imported

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")
from swebox.trainers.distributed.ray_pool import RayPoolError, RayWorkerPool  # noqa: E402

from tests.trainers.distributed.test_ray_pool_cluster import ScriptedWorker, config, task  # noqa: E402
from tests.trainers.ray_cluster import add_swebox_node, swebox_cluster  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _wait_until_dead(pid: int, timeout_s: float = 60.0) -> None:
    """Poll until ``pid`` is gone or a zombie (dead, not yet reaped by its raylet): the weight sync that follows
    must meet a dead actor, however slowly a loaded machine delivers the signal."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except FileNotFoundError:
            return
        assert time.monotonic() < deadline, f"actor process {pid} still alive {timeout_s} s after SIGKILL"
        time.sleep(0.05)


class KillableWorker(ScriptedWorker):
    """The scripted worker that says its pid, and dies once in a weight sync when the weights ask it to."""

    def set_weights(self, state_dict, version: int) -> None:
        marker = state_dict.get("die_once")
        if marker and not Path(marker).exists():
            Path(marker).write_text("died")
            os._exit(1)
        super().set_weights(state_dict, version)

    def run(self, tasks, group_size):
        return [{**d, "pid": os.getpid()} for d in super().run(tasks, group_size)]


@pytest.fixture(scope="module")
def cluster():
    # the head has room for one more actor than it starts with; the worker node alone advertises 'solo'
    with swebox_cluster(head_cpus=2, workers=[{"num_cpus": 1, "resources": {"solo": 1.0}}]) as cluster:
        yield cluster


def make_pool(lines: list[str], **ray_fields) -> RayWorkerPool:
    cfg = config()
    cfg = dataclasses.replace(cfg, ray=dataclasses.replace(cfg.ray, **ray_fields))
    return RayWorkerPool(cfg, worker_factory=KillableWorker, echo=lines.append)


def weights(value: float, **extra) -> dict:
    return {"w": torch.tensor([value, value]), **extra}


def test_the_only_actor_killed_in_a_rollout_is_replaced_and_the_step_finishes(cluster, tmp_path):
    lines: list[str] = []
    pool = make_pool(lines, node_resource="solo")  # one swebox node, one actor: the documented default
    try:
        assert len(pool.actors) == 1
        pool.set_weights(weights(1.0), version=1)
        out = pool.run_groups([task(0, "alpha"), task(1, "beta", die_once=str(tmp_path / "died"))], 2)
        assert (tmp_path / "died").exists()
        assert [d["task_id"] for d in out] == ["alpha.t0"] * 2 + ["beta.t1"] * 2
        assert {(d["version"], d["weight_sum"]) for d in out} == {(1, 2.0)}  # the replacement got the weights
        assert pool.step_metrics() == {"pool/live_actors": 1.0, "pool/actor_restarts": 1.0}
        assert len(lines) == 1 and "died during a rollout; replaced on node" in lines[0]
    finally:
        pool.close()


def test_idle_actor_killed_between_steps_is_replaced_at_the_weight_sync(cluster):
    lines: list[str] = []
    pool = make_pool(lines)
    try:
        assert len(pool.actors) == 2
        pool.set_weights(weights(1.0), version=1)
        out = pool.run_groups([task(0, "alpha"), task(1, "beta")], 2)
        victim = out[-1]["pid"]
        os.kill(victim, signal.SIGKILL)  # kill -9 of an idle actor
        _wait_until_dead(victim)
        pool.set_weights(weights(3.0), version=2)  # raised ActorDiedError before
        out = pool.run_groups([task(2, "alpha"), task(3, "beta")], 2)
        assert victim not in {d["pid"] for d in out}
        assert {(d["version"], d["weight_sum"]) for d in out} == {(2, 6.0)}
        assert pool.step_metrics() == {"pool/live_actors": 2.0, "pool/actor_restarts": 1.0}
        assert any("died during set_weights" in line for line in lines)
    finally:
        pool.close()


def test_actor_killed_during_the_weight_sync_is_replaced_with_the_new_weights(cluster, tmp_path):
    pool = make_pool([])
    try:
        pool.set_weights(weights(2.0, die_once=str(tmp_path / "died")), version=1)
        assert (tmp_path / "died").exists()
        out = pool.run_groups([task(0, "alpha"), task(1, "beta")], 2)
        assert {(d["version"], d["weight_sum"], d["loads"]) for d in out} == {(1, 4.0, 1)}
        assert pool.step_metrics()["pool/live_actors"] == 2.0
    finally:
        pool.close()


def test_busy_actor_killed_the_pool_keeps_its_size(cluster, tmp_path):
    lines: list[str] = []
    pool = make_pool(lines)
    try:
        tasks = [task(0, "alpha"), task(1, "beta", die_once=str(tmp_path / "died"))]
        out = pool.run_groups(tasks, 2)
        assert [d["task_id"] for d in out] == ["alpha.t0"] * 2 + ["beta.t1"] * 2
        assert len(pool.actors) == 2 and sorted(pool.actor_nodes) == pool.nodes and len(pool.nodes) == 2
        assert pool.step_metrics() == {"pool/live_actors": 2.0, "pool/actor_restarts": 1.0}
        assert len(lines) == 1
    finally:
        pool.close()


def test_close_tolerates_a_dead_actor(cluster):
    """A dead actor is skipped, not waited for: with the close's own deadline lifted, a close that waited on the
    dead actor would hang until the module's pytest timeout, and fail there."""
    pool = make_pool([])
    out = pool.run_groups([task(0, "alpha"), task(1, "beta")], 2)
    os.kill(out[0]["pid"], signal.SIGKILL)
    close = pool.actor_set.close
    pool.actor_set.close = lambda: close(timeout=None)
    pool.close()
    assert pool.actors == []


def test_a_group_that_kills_every_actor_fails_the_call_naming_the_task(cluster, tmp_path, monkeypatch):
    class Crasher(KillableWorker):
        def run(self, tasks, group_size):
            if any(t.instance_id == "beta.t1" for t in tasks):
                os._exit(1)
            return super().run(tasks, group_size)

    cfg = config()
    pool = RayWorkerPool(cfg, worker_factory=Crasher, echo=lambda _: None)
    try:
        with pytest.raises(RayPoolError, match=r"task 'beta.t1'.*killed 3 actors"):
            pool.run_groups([task(0, "alpha"), task(1, "beta")], 2)
        assert len(pool.actors) == 2  # every one it killed was replaced
    finally:
        pool.close()


def test_a_node_that_leaves_the_cluster_has_its_actor_replaced_elsewhere(cluster):
    node = add_swebox_node(cluster, num_cpus=1)
    cluster.wait_for_nodes()
    lines: list[str] = []
    pool = make_pool(lines)
    try:
        assert len(pool.nodes) == 3
        gone = node.node_id
        pool.set_weights(weights(1.0), version=1)
        cluster.remove_node(node)
        tasks = [task(i, name) for i, name in enumerate(["alpha", "beta", "gamma"] * 2)]
        out = pool.run_groups(tasks, 2)
        assert [d["task_id"] for d in out] == [t.instance_id for t in tasks for _ in range(2)]
        assert gone not in {d["node"] for d in out} and {(d["version"], d["weight_sum"]) for d in out} == {(1, 2.0)}
        # the head had room for one more actor: the pool is back to three
        assert len(pool.actors) == 3 and gone not in pool.actor_nodes
        assert pool.step_metrics() == {"pool/live_actors": 3.0, "pool/actor_restarts": 1.0}
        assert any(f"on node {gone[:8]} died" in line for line in lines)
    finally:
        pool.close()


class StoreViewWorker(KillableWorker):
    """Its node "sees" a task's layers only when the task says so (as a store mounted on some nodes only)."""

    def preflight(self, tasks):
        return [f"task {t.instance_id}: layers missing" for t in tasks if self.node not in t.metadata["present_on"]]


def test_preflight_checks_every_task_on_every_node(cluster):
    cfg = config()
    cfg = dataclasses.replace(cfg, ray=dataclasses.replace(cfg.ray, actors_per_node=2, actor_num_cpus=0.5))
    pool = RayWorkerPool(cfg, worker_factory=StoreViewWorker, echo=lambda _: None)
    try:
        head, worker = sorted(set(pool.actor_nodes), key=lambda n: n != ray.get_runtime_context().get_node_id())
        tasks = [task(0, "alpha", present_on=[head, worker]), task(1, "beta", present_on=[head])]
        # one check per node (not per actor), each line naming the node
        assert pool.preflight(tasks) == [f"on node {worker[:8]}: task beta.t1: layers missing"]
    finally:
        pool.close()
