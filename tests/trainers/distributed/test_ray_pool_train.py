"""A real GRPO training step whose rollouts run on a two-node Ray cluster on loopback (e2e).

Each node gets one RayWorkerPool actor holding a real RolloutWorker (tiny random policy, transformers backend)
whose episodes are real SWE episodes over the calc fixture env layer, graded in sandboxes. The step must run
episodes on both nodes, grade them for real, log its metrics and leave no actor behind.
"""

from __future__ import annotations

import contextlib
import functools
import os

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray address on 127.0.0.1, before ray is imported

ray = pytest.importorskip("ray")
from swebox.trainers.distributed.ray_pool import RayWorkerPool  # noqa: E402
from swebox.trainers.run.config import load_config  # noqa: E402
from swebox.trainers.run.tracking import read_metrics  # noqa: E402

from tests.calc import calc_task  # noqa: E402
from tests.trainers.ray_cluster import swebox_cluster  # noqa: E402

CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "..", "configs", "demo.yaml")


def calc_worker(cfg, layers: list[str]):
    """A RolloutWorker whose episodes all start from the calc env layer (built on the test machine)."""
    from swebox.trainers.rl.rollout import RolloutWorker, swe_episode_factory

    return RolloutWorker(cfg, swe_episode_factory(cfg, layers=layers))


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_training_step_runs_episodes_on_both_nodes(calc_layer, tmp_path):
    from swebox.trainers.rl.trainer import Trainer

    cfg = load_config(
        CONFIG,
        [
            "total_steps=1",
            "rollout.tasks_per_step=2",
            "rollout.group_size=2",
            "rollout.max_parallel_episodes=2",
            "generation.max_new_tokens=16",
            "env.max_turns=1",
            "ray.num_cpus=null",
            f"logging.run_dir={tmp_path}",
            "logging.wandb=disabled",
            "logging.progress=false",
            "checkpoint.every_steps=0",
        ],
    )
    tasks = [calc_task(instance_id=f"calc-add-{i}") for i in range(2)]
    with swebox_cluster(), contextlib.ExitStack() as cleanup:
        pool = RayWorkerPool(cfg, worker_factory=functools.partial(calc_worker, layers=[str(calc_layer)]))
        cleanup.callback(pool.close)
        assert len(pool.nodes) == 2
        trainer = Trainer(cfg, pool=pool, tasks=tasks, echo=lambda *_: None)
        trainer.train()
        # one env key and two groups: the per-actor cap of one group spreads them over both nodes
        assert sorted(pool.last_placement) == sorted(pool.nodes)
        trajs = trainer.last.trajectories
        assert [t.task_id for t in trajs] == ["calc-add-0"] * 2 + ["calc-add-1"] * 2
        assert not any(t.failed for t in trajs), [t.error for t in trajs if t.failed]
        assert all(t.metrics["env/grade_s"] > 0 for t in trajs)  # graded for real, in sandboxes
        assert all(sum(t.loss_mask) > 0 for t in trajs)
        [record] = read_metrics(tmp_path)
        assert record["step"] == 1
        assert record["timing/grade_s"] > 0 and record["timing/generate_s"] > 0
        assert record["timing/sync_s"] >= 0 and record["timing/step_s"] >= record["timing/rollout_s"]
