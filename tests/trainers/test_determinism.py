"""A seed pins a CPU run: the same seed gives the same numbers whatever the machine's load.

Real runs: SFT on expert episodes of the calc fixture's two tasks (real sandboxes, real grading), then GRPO
from that warm start with the transformers backend sampling in real episodes. Each run is made twice, the
second beside a CPU hog that keeps both cores half busy (Debian's stress-ng, as `make test-under-load` does),
and every number of metrics.jsonl but the clocks must be equal.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from swebox.envs.tasks import save_jsonl
from swebox.trainers.finetune.sft import run_sft
from swebox.trainers.rl.rollout import LocalWorkerPool, swe_episode_factory
from swebox.trainers.rl.trainer import Trainer
from swebox.trainers.run.config import load_config
from swebox.trainers.run.tracking import measured

from tests.calc import GOLD_DIV, calc_task

pytestmark = pytest.mark.e2e

SMALL = [
    "logging.wandb=disabled",
    "logging.progress=false",
    "checkpoint.every_steps=0",
    "rollout.tasks_per_step=2",
    "rollout.group_size=4",
    "rollout.max_parallel_episodes=8",
    "env.command_timeout_s=60",
    "env.grade_timeout_s=300",
    "env.time_limit_s=900",
]


def _numbers(run_dir: Path) -> list[dict[str, float]]:
    """metrics.jsonl without what the host measures (clocks, throughput, memory: tracking.measured)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not measured(k)} for r in records]


@contextmanager
def cpu_hog() -> Iterator[None]:
    """Both cores half busy for the duration: stress-ng where installed, else two Python busy loops at 50%."""
    if shutil.which("stress-ng"):
        cmd = ["stress-ng", "--cpu", "2", "--cpu-load", "50", "--timeout", "900", "--quiet"]
    else:
        loop = "import time\nwhile True:\n t=time.monotonic()\n while time.monotonic()-t<0.05: pass\n time.sleep(0.05)"
        cmd = ["sh", "-c", f'{sys.executable} -c "{loop}" & {sys.executable} -c "{loop}" & wait']
    hog = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        import os
        import signal

        os.killpg(hog.pid, signal.SIGKILL)
        hog.wait()


@pytest.fixture(scope="module")
def calc_tasks_file(tmp_path_factory) -> Path:
    div = calc_task(
        instance_id="calc-div",
        patch=GOLD_DIV,
        problem_statement="div(7, 2) returns 3, not 3.5.",
        FAIL_TO_PASS=["tests/test_ops.py::test_div"],
    )
    path = tmp_path_factory.mktemp("tasks") / "tasks.jsonl"
    save_jsonl([calc_task(), div], path)
    return path


def _sft(run_dir: Path, tasks: Path, layer: Path):
    cfg = load_config(
        "configs/demo.yaml",
        [
            *SMALL,
            f"logging.run_dir={run_dir}",
            f"env.tasks={tasks}",
            "sft.epochs=100",
            "sft.stop_at_sequence_prob=0.25",
        ],
    )
    return run_sft(cfg, episode_factory=swe_episode_factory(cfg, layers=[layer]), echo=lambda *_: None)


def _grpo(run_dir: Path, tasks: Path, layer: Path, policy: Path) -> None:
    cfg = load_config(
        "configs/demo.yaml",
        [
            *SMALL,
            f"logging.run_dir={run_dir}",
            f"env.tasks={tasks}",
            "total_steps=2",
            "model.init=pretrained",
            f"model.path={policy}",
            "generation.max_new_tokens=256",
            "optim.lr=3e-3",
        ],
    )
    pool = LocalWorkerPool(cfg, swe_episode_factory(cfg, layers=[layer]))
    Trainer(cfg, pool, echo=lambda *_: None).train()


def test_a_seeded_sft_and_grpo_run_give_the_same_numbers_idle_and_beside_a_cpu_hog(
    tmp_path, calc_layer, calc_tasks_file
):
    idle = _sft(tmp_path / "sft-idle", calc_tasks_file, calc_layer)
    with cpu_hog():
        busy = _sft(tmp_path / "sft-busy", calc_tasks_file, calc_layer)
    assert idle.report.kept == 2 and len(idle.records) > 1
    assert _numbers(tmp_path / "sft-idle") == _numbers(tmp_path / "sft-busy")

    _grpo(tmp_path / "grpo-idle", calc_tasks_file, calc_layer, idle.policy)
    with cpu_hog():
        _grpo(tmp_path / "grpo-busy", calc_tasks_file, calc_layer, busy.policy)
    idle_numbers, busy_numbers = _numbers(tmp_path / "grpo-idle"), _numbers(tmp_path / "grpo-busy")
    assert len(idle_numbers) == 2
    # the policy sampled for real: tokens of its own, and the update moved it
    assert idle_numbers[0]["tokens/response_len_mean"] > 0 and idle_numbers[0]["policy/entropy"] > 0
    assert idle_numbers == busy_numbers
