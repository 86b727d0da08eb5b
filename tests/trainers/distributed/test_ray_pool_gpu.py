"""With the vLLM backend, rollout actors ask Ray for GPUs and go only to swebox nodes that have them (a loopback
two-node cluster whose second node declares GPUs; the scripted worker only reports what Ray gave it)."""

from __future__ import annotations

import dataclasses
import os

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray address on 127.0.0.1, before ray is imported

ray = pytest.importorskip("ray")
from swebox.trainers.distributed.ray_cluster import actor_gpus, actor_options  # noqa: E402
from swebox.trainers.distributed.ray_pool import RayPoolError, RayWorkerPool  # noqa: E402
from swebox.trainers.run.config import TrainConfig  # noqa: E402

from tests.trainers.ray_cluster import swebox_cluster  # noqa: E402
from tests.trainers.rl.test_rollout import stub_task  # noqa: E402

pytestmark = pytest.mark.timeout(300)


class GpuReportingWorker:
    def __init__(self, cfg: TrainConfig) -> None:
        self.gpu_ids = [str(g) for g in ray.get_gpu_ids()]
        self.node = ray.get_runtime_context().get_node_id()

    def set_weights(self, state_dict, version: int) -> None:
        pass

    def preflight(self, tasks: list) -> list[str]:
        return []  # scripted: no layers to look for

    def close(self) -> None:
        pass

    def run(self, tasks: list[dict], group_size: int) -> list[dict]:
        return [
            {"task_id": t.instance_id, "gpus": self.gpu_ids, "node": self.node}
            for t in tasks
            for _ in range(group_size)
        ]


def vllm_config(actors_per_node: int = 1) -> TrainConfig:
    cfg = TrainConfig()
    return dataclasses.replace(
        cfg,
        generation=dataclasses.replace(cfg.generation, backend="vllm"),
        ray=dataclasses.replace(cfg.ray, actors_per_node=actors_per_node, actor_num_cpus=0.5),
    )


def test_actor_gpus_and_options():
    assert actor_gpus(TrainConfig()) == 0.0
    assert actor_gpus(vllm_config()) == 1.0
    assert actor_options(vllm_config(), "ab" * 28)["num_gpus"] == 1.0
    assert actor_options(TrainConfig(), "ab" * 28)["num_gpus"] == 0.0


@pytest.fixture(scope="module")
def cluster():
    # declared GPUs on the second node: Ray only accounts for them
    with swebox_cluster(workers=({"num_cpus": 1, "num_gpus": 2},)) as cluster:
        yield cluster


def test_vllm_actors_only_on_the_gpu_node_with_their_gpus(cluster):
    gpu_node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU"))
    pool = RayWorkerPool(vllm_config(actors_per_node=2), worker_factory=GpuReportingWorker)
    try:
        assert pool.actor_nodes == [gpu_node, gpu_node]
        out = pool.run_groups([stub_task("a"), stub_task("b")], 1)
        assert sorted(g for d in out for g in d["gpus"]) == ["0", "1"]  # one GPU each, not the same one
    finally:
        pool.close()


def test_not_enough_gpus_is_a_clear_error(cluster):
    with pytest.raises(RayPoolError, match=r"a swebox node with 3 GPU\(s\).*--num-gpus"):
        RayWorkerPool(vllm_config(actors_per_node=3), worker_factory=GpuReportingWorker)
    assert ray.is_initialized()
